"""llama.cpp's /completion request body: its field names, forms and defaults mapped onto the shared _Sampling.

The sampling fields and their checks are protocol._Sampling's (the OpenAI routes use the same
ones); this module only translates what llama.cpp spells differently before they are checked:
`n_predict` (-1: up to the context), `n_probs`, `n_cmpl`, `seed` -1 (random), a negative
temperature (greedy), `logit_bias` as [[id, bias]] / {"id": bias} / token strings / false,
`ignore_eos`, `repeat_last_n`, and `samplers` (a list of stage names or llama.cpp's letters).
A llama.cpp knob that the shared body does not have yet is refused when it would change the
output, never ignored (see `_UNSUPPORTED`).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import BaseModel, Field, ValidationError

from .protocol import ServerError, _Sampling

RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: draw a random seed
BAN = -100.0  # the bias piegpu gives a token llama.cpp biases by `false` (never drawn)
# llama.cpp's defaults of the /completion fields that piegpu's shared body defaults otherwise
DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
# llama.cpp's sampler names (common_sampler_type_to_str) and the letters of its --sampling-seq
SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
ALT_NAMES = {"top-k": "top_k", "top-p": "top_p", "nucleus": "top_p", "min-p": "min_p", "typical_p": "typ_p",
             "typical": "typ_p", "typ-p": "typ_p", "typ": "typ_p", "temp": "temperature",
             "top-n-sigma": "top_n_sigma"}
LETTERS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p", "p": "top_p",
           "m": "min_p", "x": "xtc", "t": "temperature"}
# the order piegpu's rows apply the default stages in, reported when a request gives no `samplers`
ROW_ORDER = ("penalties", "temperature", "top_k", "top_p", "min_p", "typ_p")
# llama.cpp fields piegpu cannot honour: (value that changes nothing, why); refused otherwise
_UNSUPPORTED = {
    "min_keep": (0, "min_keep is not a stage of piegpu's samplers"),
    "n_indent": (0, "n_indent (minimum line indentation) is not supported"),
    "t_max_predict_ms": (0, "t_max_predict_ms (a time limit) is not supported; use n_predict"),
    "post_sampling_probs": (False, "post_sampling_probs is not supported: n_probs gives the model's log-probabilities"),
    "return_progress": (False, "return_progress (prompt progress chunks) is not supported"),
    "n_cache_reuse": (0, "n_cache_reuse (KV shifting) is not supported; prefixes are reused without it"),
}


class LoraScale(BaseModel):
    """One entry of /completion's `lora`: an adapter id of GET /lora-adapters and its scale."""

    id: int
    scale: float = 1.0


class LlamaCompletionRequest(_Sampling):
    """The body of llama.cpp's POST /completion (build it with parse_body: it translates llama.cpp's forms)."""

    model: Optional[str] = None
    prompt: Any = None
    n_predict: int = Field(default=-1, ge=-1)
    n_probs: int = Field(default=0, ge=0, le=20)
    cache_prompt: bool = True  # piegpu always reuses cached prefixes: accepted, changes nothing
    return_tokens: bool = False
    id_slot: int = -1  # piegpu has no slots: accepted, changes nothing
    ignore_eos: bool = False
    timings_per_token: bool = False
    n_keep: int = 0  # piegpu never shifts the context (prompt + n_predict must fit): accepted, changes nothing
    n_discard: int = 0
    response_fields: Optional[list[str]] = None
    lora: Optional[list[LoraScale]] = None  # [{"id", "scale"}]: the adapters of GET /lora-adapters (lora_routes.py)

    def limit(self) -> Optional[int]:
        """n_predict (None: up to the context)."""
        return None if self.n_predict < 0 else self.n_predict


def parse_body(body: Any, encode, vocab: int, eos_ids, ctx: int) -> tuple:
    """(LlamaCompletionRequest, applied sampler names) from a /completion JSON body; 400 naming a bad field.

    `encode(text, add_special)` tokenizes (logit_bias token strings).
    """
    if not isinstance(body, dict):
        raise ServerError(400, "the request body must be a JSON object", None)
    data = dict(body)
    if "prompt" not in data:
        raise ServerError(400, '"prompt" is required: a string, token ids, or a list of prompts', "prompt")
    for key in ("n_predict", "max_completion_tokens", "max_tokens"):  # llama.cpp's order of precedence
        if key in data and data[key] is not None:
            data["n_predict"] = data.pop(key)
            break
    for key in ("max_tokens", "max_completion_tokens") + (("n_predict",) if data.get("n_predict") is None else ()):
        data.pop(key, None)
    if "n_cmpl" in data:
        data["n"] = data.pop("n_cmpl")
    lp = data.pop("logprobs", None)
    if isinstance(lp, int) and not isinstance(lp, bool) and "n_probs" not in data:
        data["n_probs"] = lp  # llama.cpp takes OpenAI's logprobs when n_probs is absent
    for key, value in DEFAULTS.items():
        if data.get(key) is None:  # as llama.cpp's json_value: absent or null is the default
            data[key] = value
    if isinstance(data.get("temperature"), (int, float)) and data["temperature"] < 0:
        data["temperature"] = 0.0  # llama.cpp: a negative temperature samples greedily
    if data.get("seed") in (-1, RANDOM_SEED):
        data["seed"] = None
    if isinstance(data.get("stop"), str):
        data["stop"] = [data["stop"]]
    _check_unsupported(data)
    applied = _samplers(data)
    if data.get("mirostat") in (1, 2):  # llama.cpp: Mirostat replaces the sampler chain (temperature, then it;
        data.pop("samplers", None)     # server/sampling.py applies no other stage beside it)
        applied = ["temperature"]
    data["logit_bias"] = _logit_bias(data.get("logit_bias"), encode, vocab)
    if data.get("ignore_eos") is True:  # llama.cpp biases every end-of-generation token by -inf
        for tok in eos_ids:
            data["logit_bias"][str(tok)] = BAN
    if not data["logit_bias"]:
        data["logit_bias"] = None
    _repeat_last_n(data, ctx)
    try:
        req = LlamaCompletionRequest.model_validate(data)
    except ValidationError as e:
        err = validation_error(e)
        if err.param == "n" and "n_cmpl" in body:
            err.param, err.message = "n_cmpl", err.message.replace("n: ", "n_cmpl: ", 1)
        raise err from None
    return req, applied


def validation_error(e: ValidationError) -> ServerError:
    """A 400 naming the first bad field, with every problem (up to 5) in the message."""
    errs = e.errors()
    loc = [str(x) for x in errs[0].get("loc", ())] if errs else []
    if errs and not loc:  # a check of the whole body: the field its message starts with
        first = re.split(r"[,:\s]", str(errs[0].get("msg", "")).removeprefix("Value error, "), maxsplit=1)[0]
        loc = [first] if first in LlamaCompletionRequest.model_fields else []
    msg = "; ".join((f"{'.'.join(str(x) for x in er['loc'])}: " if er.get("loc") else "")
                    + str(er.get("msg", "")).removeprefix("Value error, ") for er in errs[:5])
    return ServerError(400, msg, ".".join(loc) or None)


def _check_unsupported(data: dict) -> None:
    for key, (off, why) in _UNSUPPORTED.items():
        if key not in data or data[key] in (None, off):
            continue
        raise ServerError(400, f"{key}: {why}. Fix: leave it out (or send {off!r})", key)


def _samplers(data: dict) -> list:
    """llama.cpp's `samplers`: checked names; stages it leaves out are turned off. Returns the order applied."""
    given = data.get("samplers")
    if given is None:
        return list(ROW_ORDER)
    if isinstance(given, str):
        bad = [c for c in given if c not in LETTERS]
        if bad:
            raise ServerError(400, f"samplers: unknown sampler letter(s) {bad}; llama.cpp's letters are "
                                   f"{LETTERS}", "samplers")
        names = [LETTERS[c] for c in given]
    elif isinstance(given, list) and all(isinstance(n, str) for n in given):
        bad = [n for n in given if n not in SAMPLERS and n not in ALT_NAMES]
        if bad:
            raise ServerError(400, f"samplers: unknown sampler {bad[0]!r}. Fix: use llama.cpp's names "
                                   f"{list(SAMPLERS)}", "samplers")
        names = [ALT_NAMES.get(n, n) for n in given]
    else:
        raise ServerError(400, "samplers must be a list of sampler names (or a string of llama.cpp's sampler "
                               "letters such as \"kpmt\")", "samplers")
    data["samplers"] = names  # the shared body applies the list: its order, unlisted stages off (server/sampling.py)
    return names


def _logit_bias(value, encode, vocab: int) -> dict:
    """llama.cpp's logit_bias forms -> {"token id": bias} (biases of one token add up, as llama.cpp applies them)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        if not all(isinstance(el, list) and len(el) == 2 for el in value):
            raise ServerError(400, "logit_bias must be [[token, bias], ...] or {\"token\": bias}; a token is an id "
                                   "or a string, a bias a number or false (never this token)", "logit_bias")
        pairs = [tuple(el) for el in value]
    else:
        raise ServerError(400, "logit_bias must be a list of [token, bias] pairs or an object", "logit_bias")
    out: dict = {}
    for tok, bias in pairs:
        if bias is False:
            bias = BAN
        elif bias is True or not isinstance(bias, (int, float)):
            continue  # llama.cpp skips a bias that is neither a number nor false
        if isinstance(tok, str) and tok.strip().lstrip("-").isdigit():
            tok = int(tok)
        if isinstance(tok, int) and not isinstance(tok, bool):
            if not 0 <= tok < vocab:
                raise ServerError(400, f"logit_bias: token {tok} is outside the vocabulary [0, {vocab})", "logit_bias")
            ids = [tok]
        elif isinstance(tok, str):
            ids = encode(tok, False)
        else:
            raise ServerError(400, f"logit_bias: {tok!r} is neither a token id nor a string", "logit_bias")
        for t in ids:
            out[str(t)] = max(BAN, min(-BAN, out.get(str(t), 0.0) + float(bias)))
    return out


def _repeat_last_n(data: dict, ctx: int) -> None:
    n = data.pop("repeat_last_n", -1)
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < -1:
        raise ServerError(400, f"repeat_last_n must be an int >= -1, got {n!r}", "repeat_last_n")
    if n == 0:  # llama.cpp: 0 turns the penalties off
        data.update(repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0)
        data.pop("repetition_penalty", None)
        return
    active = (data.get("repeat_penalty", 1.0) != 1.0 or data.get("repetition_penalty") not in (None, 1.0)
              or data.get("presence_penalty", 0.0) != 0.0 or data.get("frequency_penalty", 0.0) != 0.0)
    if active and n != -1 and n < ctx:
        raise ServerError(400, f"repeat_last_n={n}: piegpu's penalties count every token of the sequence (prompt "
                               "and drawn), not the last n. Fix: send -1 (the whole context) or 0 (penalties off)",
                          "repeat_last_n")
