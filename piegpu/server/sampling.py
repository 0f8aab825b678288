"""A request's sampling fields (OpenAI's and llama.cpp server's names) as piegpu SamplingOptions.

llama.cpp's semantics where they differ from a plain option list: with `mirostat` 1 or 2 the chain is
temperature + Mirostat alone (after the logit bias), as llama.cpp's common sampler builds it; with a
`samplers` list only the listed stages apply, in its order ("penalties" and "dry" included),
"p_less" in it turns p-less on (it has no parameter), and a list without "temperature" samples at
temperature 1 (the model's own distribution) -- one rule for the OpenAI routes and llama.cpp's /completion.
"""

from __future__ import annotations

from ..errors import PieGpuError
from ..samplers.options import SamplingOptions
from ..samplers.spec import SAMPLER_ORDER_NAMES, sampler_order
from .protocol import ServerError

PENALTY_KEYS = ("repetition_penalty", "presence_penalty", "frequency_penalty")
DRY_KEYS = ("dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers")


def _names(samplers) -> list:
    """The lower-case sampler names of a `samplers` field (a list, or a string split on ';' or ',')."""
    raw = samplers.replace(",", ";").split(";") if isinstance(samplers, str) else list(samplers)
    return [str(n).strip().lower() for n in raw if str(n).strip()]


def logit_bias(req, vocab: int) -> dict:
    """{token_id: bias} of the request (400 for a token outside the vocabulary)."""
    out = {}
    for k, b in (req.logit_bias or {}).items():
        tok = int(k)
        if tok >= vocab:
            raise ServerError(400, f"logit_bias: token {tok} is outside the vocabulary [0, {vocab})", "logit_bias")
        out[tok] = float(b)
    return out


def request_options(req, vocab: int, programs=None) -> SamplingOptions:
    """The SamplingOptions of a request's sampling fields (400 naming the field for a value piegpu refuses).

    `programs`: the server's SamplerPrograms, where `sampler_program` ids are looked up.
    """
    if req.sampler_program is not None:
        return _program(req, programs)
    bias = logit_bias(req, vocab)
    top_k = req.top_k if 0 < req.top_k <= vocab else 0  # -1, 0 or a k at least the vocab: every token
    rep = req.repetition_penalty if req.repetition_penalty is not None else req.repeat_penalty
    opts: dict = {"logit_bias": bias}
    temperature = req.temperature
    if req.mirostat:
        opts["mirostat_v1" if req.mirostat == 1 else "mirostat"] = req.mirostat_tau
        opts["mirostat_eta"] = req.mirostat_eta
        return _options(req, opts, "mirostat", temperature)
    opts.update(repetition_penalty=rep, presence_penalty=req.presence_penalty,
                frequency_penalty=req.frequency_penalty)
    stages = {"top_k": top_k or None, "top_p": req.top_p if req.top_p < 1.0 else None,
              "min_p": req.min_p or None, "typical": req.typical_p if req.typical_p < 1.0 else None,
              "top_n_sigma": req.top_n_sigma if req.top_n_sigma > 0 else None,
              "tfs_z": req.tfs_z if req.tfs_z < 1.0 else None, "top_a": req.top_a or None,
              "p_less": True if req.p_less else None}
    if req.xtc_probability > 0 and req.xtc_threshold <= 0.5:
        stages.update(xtc_probability=req.xtc_probability, xtc_threshold=req.xtc_threshold)
    if req.dynatemp_range > 0:
        stages.update(dynatemp_range=req.dynatemp_range, dynatemp_exponent=req.dynatemp_exponent)
    if req.dry_multiplier > 0:
        opts.update(dry_multiplier=req.dry_multiplier, dry_base=req.dry_base,
                    dry_allowed_length=req.dry_allowed_length, dry_penalty_last_n=req.dry_penalty_last_n)
        if req.dry_sequence_breakers is not None:
            opts["dry_sequence_breakers"] = list(req.dry_sequence_breakers)
    if req.samplers is not None:
        names = _names(req.samplers)
        try:
            order = sampler_order(names)
        except PieGpuError as e:
            raise ServerError(400, str(e), "samplers") from None
        if any(n in ("p_less", "p-less") for n in names):
            stages["p_less"] = True
        stages = {k: v for k, v in stages.items() if k in order or (k in ("xtc_threshold", "dynatemp_exponent")
                                                                    and _owner(k) in order)}
        if "penalties" not in names:
            opts.update({k: None for k in PENALTY_KEYS})
        if "dry" not in names:
            opts.update({k: None for k in DRY_KEYS})
        listed = [n for n in names if SAMPLER_ORDER_NAMES.get(n) in stages]
        if listed:
            opts["samplers"] = listed
        if temperature > 0 and not any(SAMPLER_ORDER_NAMES.get(n) == "dynatemp_range" for n in names):
            temperature = 1.0  # no temperature stage listed: the distribution as the model gives it
    opts.update(stages)
    return _options(req, opts, "samplers" if req.samplers is not None else None, temperature)


def _program(req, programs) -> SamplingOptions:
    """A registered program as the whole sampler (400 if other sampling fields are set too)."""
    if programs is None:
        raise ServerError(400, "this server takes no sampler programs", "sampler_program")
    prog = programs.get(req.sampler_program)
    set_too = sorted(k for k in req.model_fields_set if k in SAMPLING_FIELDS)
    if set_too:
        raise ServerError(400, f"sampler_program is the whole sampler; {set_too} would not apply. Fix: trace them "
                               "into the program, or drop sampler_program", set_too[0])
    return SamplingOptions.of(prog)


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "typical_p", "presence_penalty", "frequency_penalty",
                   "repeat_penalty", "repetition_penalty", "logit_bias", "mirostat", "mirostat_tau", "mirostat_eta",
                   "xtc_probability", "xtc_threshold", "dry_multiplier", "dry_base", "dry_allowed_length",
                   "dry_penalty_last_n", "dry_sequence_breakers", "top_n_sigma", "dynatemp_range",
                   "dynatemp_exponent", "tfs_z", "top_a", "p_less", "samplers")


def _owner(key: str) -> str:
    return {"xtc_threshold": "xtc_probability", "dynatemp_exponent": "dynatemp_range"}[key]


def _options(req, opts: dict, param, temperature: float) -> SamplingOptions:
    try:
        return SamplingOptions.of("temperature", temperature, where="request",
                                  **{k: v for k, v in opts.items() if v is not None})
    except PieGpuError as e:
        raise ServerError(400, str(e), param) from None


__all__ = ["request_options", "logit_bias"]
