"""The OpenAI-compatible HTTP API (FastAPI): chat completions, completions, models, health."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, StreamingResponse

from ..errors import PieGpuError
from .engine import Engine, Job, QueueFull
from .jobs import EngineStopped
from .llamacpp import register_llamacpp
from .lora_routes import LoraServing, register_lora
from .page import register_page
from .protocol import ChatCompletionRequest, CompletionRequest, ServerError, error_body
from .programs import SamplerPrograms, register_programs
from .sampling import request_options
from .tools import plan as tool_plan

DISCONNECT_POLL_S = 0.25  # how often a non-streaming request checks that its client is still there


def _seed(req, i: int) -> int:
    base = secrets.randbits(32) if req.seed is None else req.seed
    return (base + i) & 0xFFFFFFFF


class Api:
    """The request handlers over one Engine (see build_app)."""

    def __init__(self, engine: Engine, model_id: str, constraints: Callable | None = None):
        self.engine = engine
        self.model = engine.model
        self.model_id = model_id
        self.created = int(time.time())
        self.constraints = constraints  # (request) -> a per-choice constraint factory, or None
        self.programs = SamplerPrograms(engine.vocab)  # sampler programs registered at /v1/sampler-programs
        self.lora = LoraServing(engine.model, model_id)  # adapters as model ids, llama.cpp's ids and scales

    # ---- request -> jobs ----------------------------------------------------------------------
    def check_model(self, name: str) -> None:
        """404 for a model this server does not serve (as OpenAI and vLLM answer): the base model or an adapter."""
        self.lora.check(name)

    def budget(self, req, prompt_ids: list) -> int:
        """max_tokens for this prompt, or a 400 naming both numbers when prompt + max_tokens exceed the context."""
        ctx, p = self.engine.ctx, len(prompt_ids)
        want = req.limit()
        if p >= ctx or (want is not None and p + want > ctx):
            m = want if want is not None else 1
            raise ServerError(400, f"This model's maximum context length is {ctx} tokens. However, you requested "
                                   f"{p + m} tokens ({p} in the prompt, {m} in the completion). Please reduce the "
                                   "length of the prompt or the completion.", "max_tokens", "context_length_exceeded")
        return want if want is not None else ctx - p

    def row_params(self, req, logprobs: bool, top: int) -> list:
        """The n choices' RowParams (400 for values the sampler refuses)."""
        options = request_options(req, self.engine.vocab, self.programs)
        constrained = self.constraints is not None and self.constraints.wants(req)
        try:
            tokenizer = getattr(self.model, "tokenizer", None)  # resolves DRY's string breakers
            return [options.row_params(_seed(req, i), logprobs, top, constrained, tokenizer)
                    for i in range(req.n)]
        except PieGpuError as e:
            raise ServerError(400, str(e)) from None

    def job(self, req, prompt_ids: list, logprobs: bool, top: int, emit: Callable) -> Job:
        """A Job for one prompt of a request."""
        if not prompt_ids:
            raise ServerError(400, "the prompt is empty (no tokens)", "prompt")
        bad = [t for t in prompt_ids if not 0 <= t < self.engine.vocab]
        if bad:
            raise ServerError(400, f"prompt token ids {bad[:5]} are outside the vocabulary [0, {self.engine.vocab})",
                              "prompt")
        max_tokens = self.budget(req, prompt_ids)
        params = self.row_params(req, logprobs, top)
        factory = automaton = None
        if self.constraints is not None and params[0].constrained:
            factory, automaton = self.constraints.factory(req)
        if automaton is not None:  # the grammar runs in the epilogue: the rows take no host mask
            from ..inferlets.device_grammar import on_rows
            params = [on_rows(p, automaton) for p in params]
        return Job(list(prompt_ids), params, max_tokens, req.stops(), emit, factory,
                   frozenset(self.model.config.eos_token_ids), adapter=self.lora.for_request(req),
                   automaton=automaton)

    def encode(self, text: str) -> list:
        """Token ids of `text` as model.generate encodes a prompt."""
        return self.model.tokenizer.encode(text).ids

    # ---- running ------------------------------------------------------------------------------
    def submit(self, jobs_of: Callable) -> tuple:
        """Make the jobs (jobs_of(emit) -> list) and queue them; returns (jobs, event queue)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def emit_for(k: int):
            def emit(ev):
                ev["job"] = k
                loop.call_soon_threadsafe(queue.put_nowait, ev)
            return emit
        jobs = jobs_of(emit_for)
        submitted = []
        try:
            for job in jobs:
                self.engine.submit(job)
                submitted.append(job)
        except QueueFull as e:
            for job in submitted:
                self.engine.cancel(job)
            raise ServerError(429, f"The server is busy ({e}). Retry shortly.", None, "rate_limit_exceeded",
                              "rate_limit_error", {"Retry-After": "1"}) from None
        except EngineStopped as e:
            for job in submitted:
                self.engine.cancel(job)
            raise ServerError(503, f"The server cannot generate: {e}. Restart it (see /health).", None,
                              "engine_stopped", "server_error") from None
        return jobs, queue

    async def events(self, jobs: list, queue: asyncio.Queue, request: Request | None = None):
        """Every event of the jobs until all are done (cancels them if the client goes away)."""
        left = len(jobs)
        try:
            while left:
                try:
                    ev = await asyncio.wait_for(queue.get(), DISCONNECT_POLL_S) if request else await queue.get()
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        raise asyncio.CancelledError from None
                    continue
                if ev["type"] == "error":
                    raise ServerError(500, ev["message"], kind="server_error")
                if ev["type"] == "done":
                    left -= 1
                yield ev
        finally:
            if left:
                for job in jobs:
                    self.engine.cancel(job)


def _usage(dones: list) -> dict:
    p = sum(d["usage"]["prompt_tokens"] for d in dones)
    c = sum(d["usage"]["completion_tokens"] for d in dones)
    cached = sum(d["usage"]["cached_tokens"] for d in dones)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _sse(obj) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


class _Chat:
    """The chat.completion response shapes."""

    object, chunk_object, id_prefix = "chat.completion", "chat.completion.chunk", "chatcmpl-"
    role_chunk = True  # a stream starts with a chunk announcing the assistant role

    def __init__(self, api: Api):
        self.api = api

    def logprobs(self, entries: list):
        if entries is None:
            return None
        tt = self.api.engine.token_text
        out = []
        for tok, lp, top in entries:
            text, raw = tt(tok)
            out.append({"token": text, "logprob": lp, "bytes": raw,
                        "top_logprobs": [{"token": tt(t)[0], "logprob": v, "bytes": tt(t)[1]} for t, v in top]})
        return {"content": out}

    def choice(self, index: int, text: str, entries, reason):
        return {"index": index, "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": self.logprobs(entries), "finish_reason": reason}

    def delta(self, index: int, text: str | None, entries, reason, first: bool = False):
        delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text is not None else {})
        return {"index": index, "delta": delta, "logprobs": self.logprobs(entries), "finish_reason": reason}

    def deltas(self, index: int, text: str, entries) -> list:
        """The stream's choice deltas for one generated piece (tool calls: server/toolcalls.ToolChat)."""
        return [self.delta(index, text, entries, None)]

    def finish(self, index: int, reason: str) -> list:
        """The stream's last choice deltas of a choice."""
        return [self.delta(index, None, None, reason)]


class _Completion(_Chat):
    """The text_completion response shapes (logprobs in the legacy layout)."""

    object, chunk_object, id_prefix = "text_completion", "text_completion", "cmpl-"
    role_chunk = False

    def __init__(self, api: Api):
        super().__init__(api)
        self.offsets: dict = {}  # choice index -> characters of token text so far (text_offset)

    def logprobs(self, entries: list, index: int = 0):
        if entries is None:
            return None
        tt = self.api.engine.token_text
        texts = [tt(t)[0] for t, _, _ in entries]
        at = self.offsets.get(index, 0)
        offsets = []
        for text in texts:
            offsets.append(at)
            at += len(text)
        self.offsets[index] = at
        return {"tokens": texts, "token_logprobs": [lp for _, lp, _ in entries],
                "top_logprobs": [{tt(t)[0]: v for t, v in top} for _, _, top in entries], "text_offset": offsets}

    def choice(self, index: int, text: str, entries, reason):
        return {"index": index, "text": text, "logprobs": self.logprobs(entries, index), "finish_reason": reason}

    def delta(self, index: int, text: str | None, entries, reason, first: bool = False):
        return {"index": index, "text": text or "", "logprobs": self.logprobs(entries, index),
                "finish_reason": reason}


async def _respond(api: Api, request: Request, req, shape: _Chat, prompts: list, logprobs: bool, top: int,
                   echo: list | None = None):
    """Run a request's prompts (each n choices) and answer, streaming or not (echo: each prompt's text first)."""
    n = req.n
    jobs, queue = api.submit(lambda emit_for: [api.job(req, ids, logprobs, top, emit_for(k))
                                                for k, ids in enumerate(prompts)])
    rid = shape.id_prefix + secrets.token_hex(12)
    created = int(time.time())
    head = {"id": rid, "object": shape.object, "created": created, "model": req.model or api.model_id,
            "system_fingerprint": None}

    def index(ev) -> int:
        return ev["job"] * n + ev["index"]

    if not req.stream:
        texts: dict = {}
        entries: dict = {}
        reasons: dict = {}
        dones = []
        async for ev in api.events(jobs, queue, request):
            if ev["type"] == "piece":
                i = index(ev)
                texts[i] = texts.get(i, "") + ev["text"]
                entries.setdefault(i, []).extend(ev["tokens"])
            elif ev["type"] == "finish":
                reasons[index(ev)] = ev["reason"]
            elif ev["type"] == "done":
                dones.append(ev)
        count = len(prompts) * n
        lead = [echo[i // n] if echo else "" for i in range(count)]
        choices = [shape.choice(i, lead[i] + texts.get(i, ""), entries.get(i, []) if logprobs else None,
                                reasons.get(i, "stop")) for i in range(count)]
        return JSONResponse({**head, "choices": choices, "usage": _usage(dones)})

    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    chunk_head = {**head, "object": shape.chunk_object}

    async def stream():
        dones = []
        if shape.role_chunk:
            yield _sse({**chunk_head, "choices": [shape.delta(i, None, None, None, first=True)
                                                  for i in range(len(prompts) * n)]})
        if echo:
            yield _sse({**chunk_head, "choices": [shape.delta(i, echo[i // n], None, None)
                                                  for i in range(len(prompts) * n)]})
        try:
            async for ev in api.events(jobs, queue):
                if ev["type"] == "piece":
                    for d in shape.deltas(index(ev), ev["text"], ev["tokens"] if logprobs else None):
                        yield _sse({**chunk_head, "choices": [d]})
                elif ev["type"] == "finish":
                    for d in shape.finish(index(ev), ev["reason"]):
                        yield _sse({**chunk_head, "choices": [d]})
                elif ev["type"] == "done":
                    dones.append(ev)
        except ServerError as e:
            yield _sse(e.body())
            return
        if include_usage:
            yield _sse({**chunk_head, "choices": [], "usage": _usage(dones)})
        yield b"data: [DONE]\n\n"
    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def build_app(engine: Engine, model_id: str, api_key: str | None = None, max_body: int = 4 << 20,
              constraints=None, pooling: str | None = None) -> FastAPI:
    """The FastAPI app serving `engine` as `model_id` (see piegpu/server/__init__.py for the whole server)."""
    app = FastAPI(title="piegpu", description="OpenAI-compatible API of piegpu", version="1")
    api = Api(engine, model_id, constraints)
    app.state.api = api

    @app.exception_handler(ServerError)
    async def _server_error(request: Request, e: ServerError):
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError):
        errs = e.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        if first.get("type") == "json_invalid":
            msg = f"The request body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}"
            loc = []
        else:
            msg = "; ".join(f"{'.'.join(str(x) for x in er.get('loc', ()) if x != 'body') or 'body'}: "
                            f"{er.get('msg')}" for er in errs[:5])
        return JSONResponse(error_body(msg, param=".".join(loc) or None), status_code=400)

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        if api_key is not None and request.url.path.startswith("/v1/"):
            if request.headers.get("authorization", "") != f"Bearer {api_key}":
                return JSONResponse(error_body("Incorrect API key provided.", "invalid_request_error", None,
                                               "invalid_api_key"), status_code=401)
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > max_body:
            return JSONResponse(error_body(f"The request body has {size} bytes; the limit is {max_body}.",
                                           code="request_too_large"), status_code=413)
        if request.method == "POST" and size is None:
            body = b""
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_body:
                    return JSONResponse(error_body(f"The request body exceeds the limit of {max_body} bytes.",
                                                   code="request_too_large"), status_code=413)
            request._body = body  # starlette re-reads the buffered body  # noqa: SLF001
        return await call_next(request)

    register_programs(app, api.programs)

    @app.get("/health")
    async def health():
        """Whether the engine is running."""
        if engine.error is not None:
            return JSONResponse({"status": "error", "error": str(engine.error)}, status_code=503)
        kv = {**engine.model.kv_stats(), "cached_pages": engine.cache.pages_held, "cache_hits": engine.cache.hits,
              "cache_misses": engine.cache.misses, "cache_evicted": engine.cache.evicted}
        return {"status": "ok", "load": engine.load, "engine": engine.stats.as_dict(), "kv": kv,
                "lora": api.lora.memory()}

    @app.get("/v1/models")
    async def models():
        """The base model and its LoRA adapters (each a model id, its parent the base: vLLM's convention)."""
        return {"object": "list", "data": [card(n) for n in api.lora.served()]}

    def card(name: str) -> dict:
        extra = {} if name == model_id else {"parent": model_id, "root": api.model._adapters.loaded[name].path}
        return {"id": name, "object": "model", "created": api.created, "owned_by": "piegpu", **extra}

    @app.get("/v1/models/{name}")
    async def model(name: str):
        """One model's card."""
        api.check_model(name)
        return card(name)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request):
        """OpenAI chat completions: the chat template applied to the messages (tools: server/tools.py)."""
        api.check_model(body.model)
        tools = tool_plan(body, api.model)
        try:
            text = (api.model.chat_prompt(tools.messages, tools=tools.template_tools) if tools is not None
                    else api.model.chat_prompt(body.chat_messages()))
        except PieGpuError as e:
            raise ServerError(400, str(e), "messages") from None
        logprobs, top = body.logprobs, (body.top_logprobs or 0) if body.logprobs else 0
        shape = tools.shape(_Chat(api)) if tools is not None else _Chat(api)
        return await _respond(api, request, body, shape, [api.encode(text)], logprobs, top)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        """OpenAI (legacy) completions: a prompt string, several strings, or token ids."""
        api.check_model(body.model)
        p = body.prompt
        if isinstance(p, str):
            prompts = [api.encode(p)]
        elif all(isinstance(x, str) for x in p):
            prompts = [api.encode(x) for x in p]
        elif all(isinstance(x, int) for x in p):
            prompts = [list(p)]
        else:
            prompts = [list(x) for x in p]
        logprobs = body.logprobs is not None
        echo = [api.model.tokenizer.decode(ids) for ids in prompts] if body.echo else None
        return await _respond(api, request, body, _Completion(api), prompts, logprobs, body.logprobs or 0, echo)

    lc = register_llamacpp(app, api, api_key)  # llama.cpp's /completion, /tokenize, /props, /metrics...
    register_lora(app, api.lora, lc.check_key)  # /lora-adapters, /v1/load_lora_adapter (server/lora_routes.py)
    register_page(app, api, api_key)  # the chat page at / (server/page.py)
    from .embeddings import EmbeddingRoutes  # /v1/embeddings etc. from the served decoder (its --pooling)
    EmbeddingRoutes(api.model, model_id, api_key, pooling).register(app)

    def openapi() -> dict:
        """FastAPI's schema, with `model` naming the one model served (clients and fuzzers see the valid value)."""
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for name in ("ChatCompletionRequest", "CompletionRequest"):
                props = spec.get("components", {}).get("schemas", {}).get(name, {}).get("properties", {})
                if "model" in props:
                    props["model"]["enum"] = api.lora.served()
            app.openapi_schema = spec
        return app.openapi_schema
    app.openapi = openapi
    return app
