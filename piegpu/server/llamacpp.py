"""llama.cpp's server API beside the OpenAI one: /completion, /tokenize, /detokenize, /apply-template, /props, /metrics.

Field names, forms and response shapes follow llama.cpp's tools/server/README.md (the
non-OpenAI endpoints). A /completion request is a protocol._Sampling body (see
llamacpp_request.py) run through the same Api.job / Api.submit / Api.events path as the
OpenAI routes, so its rows share the engine's batched passes. Errors are llama.cpp-shaped
({"error": {"code", "message", "type"}}) plus OpenAI's "param" naming the bad field.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from .. import __version__
from ..errors import PieGpuError
from .llamacpp_request import RANDOM_SEED, parse_body
from .metrics import CONTENT_TYPE, prometheus_text
from .protocol import ChatCompletionRequest, ServerError

STOP_TYPES = {"stop token": "eos", "stop string": "word", "max_tokens": "limit"}  # TokenOutput.stop_reason -> llama.cpp


def _error(e: ServerError) -> JSONResponse:
    body = {"code": e.status, "message": e.message, "type": e.kind}
    if e.param:
        body["param"] = e.param
    return JSONResponse({"error": body}, status_code=e.status, headers=e.headers)


def _sse(obj) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


class LlamaCpp:
    """The llama.cpp routes over one Api (see register_llamacpp)."""

    def __init__(self, api: Any, api_key: str | None = None):
        self.api, self.api_key = api, api_key
        self.engine, self.model = api.engine, api.model
        self.tokenizer = self.model.tokenizer
        self._plain = None  # a copy of the tokenizer that reads special tokens as text (parse_special false)

    # ---- helpers ------------------------------------------------------------------------------
    def check_key(self, request: Request) -> None:
        """401 unless the request carries the server's API key (Authorization: Bearer KEY, or X-Api-Key)."""
        if self.api_key is None:
            return
        if (request.headers.get("authorization", "") != f"Bearer {self.api_key}"
                and request.headers.get("x-api-key") != self.api_key):
            raise ServerError(401, "Invalid API Key. Fix: send 'Authorization: Bearer KEY'", None,
                              kind="authentication_error")

    async def body(self, request: Request) -> Any:
        """The request's JSON body (400 when it is not JSON)."""
        try:
            return json.loads(await request.body() or b"null")
        except ValueError as e:
            raise ServerError(400, f"The request body is not valid JSON: {e}") from None

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list:
        """Token ids of `text` (add_special: the tokenizer's BOS/EOS template; parse_special: special tokens)."""
        tok = self.tokenizer
        if not parse_special:
            if self._plain is None:
                from tokenizers import Tokenizer
                self._plain = Tokenizer.from_str(tok.to_str())
                self._plain.encode_special_tokens = True
            tok = self._plain
        return tok.encode(text, add_special_tokens=add_special).ids

    def prompts(self, prompt) -> list:
        """llama.cpp's prompt forms -> a list of token id lists (one per prompt)."""
        if isinstance(prompt, (str, dict)):
            return [self._one(prompt)]
        if isinstance(prompt, list) and prompt:
            if all(_is_id(x) for x in prompt) or (any(_is_id(x) for x in prompt)
                                                 and all(_is_id(x) or isinstance(x, str) for x in prompt)):
                return [self._one(prompt)]  # one prompt of token ids, or ids and strings mixed
            return [self._one(p) for p in prompt]
        raise ServerError(400, "prompt must be a string, a list of token ids, a list mixing ids and strings, "
                               "{\"prompt_string\": ...}, or a non-empty list of those (several prompts)", "prompt")

    def _one(self, p) -> list:
        if isinstance(p, str):
            return self.api.encode(p)
        if isinstance(p, dict):
            if p.get("multimodal_data"):
                raise ServerError(400, "prompt.multimodal_data: piegpu serves text-only models; send text",
                                  "prompt.multimodal_data")
            if not isinstance(p.get("prompt_string"), str):
                raise ServerError(400, "a prompt object needs \"prompt_string\" (a string)", "prompt.prompt_string")
            return self.api.encode(p["prompt_string"])
        if isinstance(p, list) and p and all(_is_id(x) or isinstance(x, str) for x in p):
            ids: list = []
            for j, x in enumerate(p):  # as llama.cpp: only a leading string gets the BOS
                ids += [x] if _is_id(x) else self.encode(x, add_special=j == 0)
            return ids
        raise ServerError(400, f"a prompt must be a string, token ids (ints), or ids and strings mixed; got "
                               f"{json.dumps(p)[:80]}", "prompt")

    def settings(self, req, applied: list) -> dict:
        """llama.cpp's generation_settings of a request: the values piegpu applied."""
        g = functools.partial(getattr, req)
        rep = req.repetition_penalty if req.repetition_penalty is not None else req.repeat_penalty
        bias = [{"bias": b, "token": int(t)} for t, b in (req.logit_bias or {}).items()]
        return {
            "n_predict": req.n_predict, "seed": RANDOM_SEED if req.seed is None else req.seed,
            "temperature": req.temperature, "dynatemp_range": g("dynatemp_range", 0.0),
            "dynatemp_exponent": g("dynatemp_exponent", 1.0), "top_k": req.top_k, "top_p": req.top_p,
            "min_p": req.min_p, "top_n_sigma": req.top_n_sigma, "xtc_probability": req.xtc_probability,
            "xtc_threshold": g("xtc_threshold", 0.1), "typical_p": req.typical_p,
            "repeat_last_n": g("repeat_last_n", -1), "repeat_penalty": rep, "presence_penalty": req.presence_penalty,
            "frequency_penalty": req.frequency_penalty, "dry_multiplier": req.dry_multiplier,
            "dry_base": g("dry_base", 1.75), "dry_allowed_length": g("dry_allowed_length", 2),
            "dry_penalty_last_n": g("dry_penalty_last_n", -1),
            "dry_sequence_breakers": g("dry_sequence_breakers", ["\n", ":", "\"", "*"]), "mirostat": req.mirostat,
            "mirostat_tau": g("mirostat_tau", 5.0), "mirostat_eta": g("mirostat_eta", 0.1), "stop": req.stops(),
            "max_tokens": req.n_predict, "n_keep": req.n_keep, "n_discard": req.n_discard,
            "ignore_eos": req.ignore_eos, "stream": req.stream, "logit_bias": bias, "n_probs": req.n_probs,
            "min_keep": g("min_keep", 0), "grammar": req.grammar or "",
            "timings_per_token": req.timings_per_token, "post_sampling_probs": False, "lora": [],
            "samplers": req.samplers or applied,
            "n_ctx": self.engine.ctx, "model": self.api.model_id,
        }

    def probs(self, entries: list) -> list:
        """completion_probabilities entries (llama.cpp's logprob layout) of (token, logprob, top) triples."""
        tt = self.engine.token_text
        out = []
        for tok, lp, top in entries:
            text, raw = tt(tok)
            out.append({"id": tok, "token": text, "bytes": raw, "logprob": lp,
                        "top_logprobs": [{"id": t, "token": tt(t)[0], "bytes": tt(t)[1], "logprob": v}
                                         for t, v in top]})
        return out

    # ---- /completion --------------------------------------------------------------------------
    async def completion(self, request: Request):
        """POST /completion (and /completions): llama.cpp's native completion, streamed or not."""
        api, eng = self.api, self.engine
        req, applied = parse_body(await self.body(request), self.encode, eng.vocab,
                                  self.model.config.eos_token_ids, eng.ctx)
        prompts = self.prompts(req.prompt)
        settings = self.settings(req, applied)
        if req.n_predict == 0:  # llama.cpp evaluates the prompt only; nothing is drawn
            return JSONResponse(_many([self.final(req, settings, ids, None, None, "", [], index=k * req.n + i)
                                       for k, ids in enumerate(prompts) for i in range(req.n)]))
        logprobs = req.stream or req.n_probs > 0  # a stream's per-token ids come with the logprob entries

        def make(emit_for):
            out = []
            for k, ids in enumerate(prompts):
                job = api.job(req, ids, logprobs, req.n_probs, emit_for(k))
                if req.ignore_eos:
                    job.stop_ids = frozenset()
                out.append(job)
            return out
        try:
            jobs, queue = api.submit(make)
        except ServerError as e:
            if e.param == "max_tokens":
                e.param = "n_predict"
            raise
        n = req.n
        if req.stream:
            return StreamingResponse(self.stream(req, settings, prompts, jobs, queue), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        texts: dict = {}
        entries: dict = {}
        async for ev in api.events(jobs, queue, request):
            if ev["type"] == "piece":
                i = ev["job"] * n + ev["index"]
                texts[i] = texts.get(i, "") + ev["text"]
                entries.setdefault(i, []).extend(ev["tokens"])
        results = []
        for k, job in enumerate(jobs):
            for c in job.choices:
                i = k * n + c.index
                results.append(self.final(req, settings, prompts[k], job, c, texts.get(i, ""), entries.get(i, []),
                                          index=i))
        return JSONResponse(_many(results))

    def final(self, req, settings: dict, ids: list, job, c, text: str, entries: list, index: int = 0,
              streamed: bool = False) -> dict:
        """The last result of one choice (llama.cpp's to_json_non_oaicompat); c None: nothing was drawn."""
        reason = STOP_TYPES.get(c.out.stop_reason, "none") if c is not None else "limit"
        stopping = ""
        if reason == "word":
            s = c.out.stream
            stopping = next((w for w in req.stops() if s.decoded.startswith(w, len(s.text))), "")
        drawn = list(c.out.tokens) if c is not None else []
        res = {"index": index, "content": "" if streamed else text,
               "tokens": [] if streamed or not req.return_tokens else drawn, "id_slot": -1, "stop": True,
               "model": self.api.model_id, "tokens_predicted": c.tokens if c is not None else 0,
               "tokens_evaluated": len(ids), "generation_settings": settings,
               "prompt": self.tokenizer.decode(ids, skip_special_tokens=False), "has_new_line": "\n" in text,
               "truncated": reason == "limit" and req.n_predict < 0 and c is not None,
               "stop_type": reason, "stopping_word": stopping,
               "tokens_cached": job.cached_tokens if job is not None else 0,
               "timings": _timings(job, c.tokens if c is not None else 0)}
        if not streamed and req.n_probs > 0:
            res["completion_probabilities"] = self.probs(entries)
        return _fields(res, req.response_fields)

    async def stream(self, req, settings: dict, prompts: list, jobs: list, queue):
        """llama.cpp's SSE stream: a chunk per drawn token (content, tokens, stop false), then each choice's final."""
        n, counts, texts = req.n, {}, {}
        try:
            async for ev in self.api.events(jobs, queue):
                if ev["type"] == "piece":
                    i, k = ev["job"] * n + ev["index"], ev["job"]
                    counts[i] = counts.get(i, 0) + len(ev["tokens"])
                    texts[i] = texts.get(i, "") + ev["text"]
                    chunk = {"index": i, "content": ev["text"], "tokens": [t for t, _, _ in ev["tokens"]],
                             "stop": False, "id_slot": -1, "tokens_predicted": counts[i],
                             "tokens_evaluated": len(prompts[k])}
                    if req.timings_per_token:
                        chunk["timings"] = _timings(jobs[k], counts[i])
                    if req.n_probs > 0 and ev["tokens"]:
                        chunk["completion_probabilities"] = self.probs(ev["tokens"])
                    yield _sse(chunk)
                elif ev["type"] == "done":
                    k = ev["job"]
                    for c in jobs[k].choices:
                        i = k * n + c.index
                        yield _sse(self.final(req, settings, prompts[k], jobs[k], c, texts.get(i, ""), [], i, True))
        except ServerError as e:
            yield _sse({"error": {"code": e.status, "message": e.message, "type": e.kind}})

    # ---- the other routes ---------------------------------------------------------------------
    async def tokenize(self, request: Request):
        """POST /tokenize: {content, add_special, parse_special, with_pieces} -> {tokens}."""
        body = await self.body(request)
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            raise ServerError(400, "\"content\" (the text to tokenize, a string) is required", "content")
        flags = {}
        for key, default in (("add_special", False), ("parse_special", True), ("with_pieces", False)):
            flags[key] = body.get(key, default)
            if not isinstance(flags[key], bool):
                raise ServerError(400, f"{key} must be true or false, got {flags[key]!r}", key)
        ids = self.encode(body["content"], flags["add_special"], flags["parse_special"])
        if not flags["with_pieces"]:
            return {"tokens": ids}
        out = []
        for t in ids:
            raw = bytes(self.engine.token_text(t)[1])
            try:
                piece: Any = raw.decode("utf-8")
            except UnicodeDecodeError:
                piece = list(raw)  # llama.cpp: the bytes when the piece alone is not valid UTF-8
            out.append({"id": t, "piece": piece})
        return {"tokens": out}

    async def detokenize(self, request: Request):
        """POST /detokenize: {tokens} -> {content}."""
        body = await self.body(request)
        toks = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(toks, list) or not all(_is_id(t) for t in toks):
            raise ServerError(400, "\"tokens\" (a list of token ids) is required", "tokens")
        bad = [t for t in toks if not 0 <= t < self.engine.vocab]
        if bad:
            raise ServerError(400, f"tokens {bad[:5]} are outside the vocabulary [0, {self.engine.vocab})", "tokens")
        return {"content": self.tokenizer.decode(toks, skip_special_tokens=False)}

    async def apply_template(self, request: Request):
        """POST /apply-template: {messages} -> {prompt}, the chat template with the assistant's turn opened."""
        body = await self.body(request)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise ServerError(400, "\"messages\" (chat turns as in /v1/chat/completions) is required", "messages")
        try:
            chat = ChatCompletionRequest.model_validate({"model": self.api.model_id, "messages": body["messages"]})
        except Exception as e:  # noqa: BLE001 -- pydantic's message names the bad turn
            raise ServerError(400, f"messages: {e}", "messages") from None
        try:
            return {"prompt": self.model.chat_prompt(chat.chat_messages())}
        except PieGpuError as e:
            raise ServerError(400, str(e), "messages") from None

    async def props(self, request: Request):
        """GET /props: the default generation settings, slots, model path, chat template, build info."""
        req, applied = parse_body({"prompt": ""}, self.encode, self.engine.vocab, (), self.engine.ctx)
        params = self.settings(req, applied)
        cfg = self.model.config
        tok = self.tokenizer

        def token(i):
            return tok.id_to_token(i) if isinstance(i, int) and tok.id_to_token(i) is not None else ""
        return {"default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": self.engine.ctx,
                                                "speculative": False, "is_processing": self.engine.load > 0,
                                                "params": params, "prompt": ""},
                "n_ctx_train": cfg.max_position_embeddings,
                "total_slots": self.engine.max_batch, "model_alias": self.api.model_id,
                "model_path": _model_path(self.model.source), "chat_template": self.model.chat_template or "",
                "chat_template_caps": {}, "modalities": {"vision": False, "audio": False},
                "bos_token": token(cfg.bos_token_id), "eos_token": token((cfg.eos_token_ids or [None])[0]),
                "model_info": self.model.info,  # piegpu's: what `piegpu models` prints of it
                "build_info": f"piegpu {__version__}", "is_sleeping": False, "endpoint_slots": False,
                "endpoint_props": False, "endpoint_metrics": True, "samplers_per_request": True}

    async def metrics(self, request: Request):
        """GET /metrics: Prometheus text exposition (llama.cpp's llamacpp:* names, plus piegpu's)."""
        return PlainTextResponse(prometheus_text(self.engine), media_type=CONTENT_TYPE)


def _model_path(source: str) -> str:
    """The model file or directory the server loaded (the default model: its GGUF file)."""
    from ..model.default import DEFAULT_MODEL_NAME, default_gguf_path
    if str(source) == DEFAULT_MODEL_NAME:
        try:
            return str(default_gguf_path())
        except PieGpuError:
            pass
    return str(source)


def _is_id(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _many(results: list):
    return results[0] if len(results) == 1 else results


def _timings(job, predicted: int) -> dict:
    """llama.cpp's timings of one choice: prompt (from the start of its prefill to its first token) and drawing."""
    if job is None:
        return {"cache_n": 0, "prompt_n": 0, "prompt_ms": 0.0, "prompt_per_token_ms": 0.0, "prompt_per_second": 0.0,
                "predicted_n": 0, "predicted_ms": 0.0, "predicted_per_token_ms": 0.0, "predicted_per_second": 0.0}
    now = time.perf_counter()
    start = job.started or job.submitted
    first = job.first_token or job.finished or now
    end = job.finished or now
    prompt_n = len(job.prompt_ids) - job.cached_tokens
    prompt_ms, predicted_ms = max(0.0, first - start) * 1e3, max(0.0, end - first) * 1e3 if job.first_token else 0.0
    return {"cache_n": job.cached_tokens, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": 1e3 * prompt_n / prompt_ms if prompt_ms else 0.0,
            "predicted_n": predicted, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / predicted if predicted else 0.0,
            "predicted_per_second": 1e3 * predicted / predicted_ms if predicted_ms else 0.0}


def _fields(res: dict, paths) -> dict:
    """llama.cpp's response_fields: only these (a/b unnests b of a, under the key "a/b")."""
    if not paths:
        return res
    out = {}
    for path in paths:
        cur, ok = res, True
        for key in path.split("/"):
            if ok and isinstance(cur, dict) and key in cur:
                cur = cur[key]
            else:
                ok = False
        if ok:
            out[path] = cur
    return out


STR, BOOL, INT, NUM = {"type": "string"}, {"type": "boolean"}, {"type": "integer"}, {"type": "number"}
IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
COMPLETION = {  # the main /completion fields, for the OpenAPI schema (parse_body takes every llama.cpp field)
    "prompt": {"anyOf": [STR, IDS, {"type": "array", "items": {"anyOf": [STR, IDS]}}]},
    "n_predict": {"type": "integer", "minimum": -1}, "n_probs": {"type": "integer", "minimum": 0, "maximum": 20},
    "stream": BOOL, "stop": {"type": "array", "items": STR}, "seed": INT, "temperature": NUM, "top_k": INT,
    "top_p": NUM, "min_p": NUM, "typical_p": NUM, "repeat_penalty": NUM, "presence_penalty": NUM,
    "frequency_penalty": NUM, "samplers": {"type": "array", "items": STR}, "return_tokens": BOOL,
    "ignore_eos": BOOL, "cache_prompt": BOOL, "logit_bias": {"type": "array", "items": {"type": "array"}},
}


def _body(properties: dict, required: list) -> dict:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _route(fn):
    """A llama.cpp route: the API key checked, ServerErrors answered llama.cpp-shaped."""
    @functools.wraps(fn)
    async def run(request: Request):
        try:
            fn.__self__.check_key(request)
            return await fn(request)
        except ServerError as e:
            return _error(e)
    return run


def register_llamacpp(app: FastAPI, api: Any, api_key: str | None = None) -> LlamaCpp:
    """Add llama.cpp's server routes to `app` (the OpenAI app of build_app), served by `api`."""
    lc = LlamaCpp(api, api_key)
    for path in ("/completion", "/completions"):
        app.add_api_route(path, _route(lc.completion), methods=["POST"], tags=["llama.cpp"],
                          openapi_extra=_body(COMPLETION, ["prompt"]))
    app.add_api_route("/tokenize", _route(lc.tokenize), methods=["POST"], tags=["llama.cpp"],
                      openapi_extra=_body({"content": STR, "add_special": BOOL, "parse_special": BOOL,
                                           "with_pieces": BOOL}, ["content"]))
    app.add_api_route("/detokenize", _route(lc.detokenize), methods=["POST"], tags=["llama.cpp"],
                      openapi_extra=_body({"tokens": IDS}, ["tokens"]))
    app.add_api_route("/apply-template", _route(lc.apply_template), methods=["POST"], tags=["llama.cpp"],
                      openapi_extra=_body({"messages": {"type": "array", "items": {
                          "type": "object", "properties": {"role": STR, "content": STR}}}}, ["messages"]))
    app.add_api_route("/props", _route(lc.props), methods=["GET"], tags=["llama.cpp"])
    app.add_api_route("/metrics", _route(lc.metrics), methods=["GET"], tags=["llama.cpp"])
    return lc
