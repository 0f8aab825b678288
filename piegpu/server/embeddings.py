"""Embedding and reranking routes: OpenAI's /v1/embeddings, llama.cpp's /embedding, /v1/rerank and /rerank.

Requests that arrive together are embedded together: a worker thread takes every queued request
of the same pooling and truncation rule and runs their inputs as one embed() call (an encoder
packs them end to end into passes), then gives each request its own rows, normalized and cut
to its `dimensions`. The model is an EncoderModel (an encoder served alone: build_embedding_app)
or the decoder the generation server already serves (its --pooling, or the model's own).
"""

from __future__ import annotations

import asyncio
import base64
import queue
import threading
import time
from typing import Literal, Union

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import PieGpuError
from ..textgen.embedding import finish
from .protocol import ServerError, error_body

MAX_INPUTS = 2048  # inputs one request may carry (OpenAI's limit)
Inputs = Union[str, list[str], list[int], list[list[int]]]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EmbeddingRequest(_Body):
    input: Inputs
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    truncate: bool = False  # piegpu: cut inputs over the model's max tokens (else a 400 naming the input)
    user: str | None = None


class LlamaEmbeddingRequest(_Body):
    content: Inputs
    embd_normalize: int = 2  # llama.cpp: -1 none, 2 Euclidean (the only two piegpu does)
    truncate: bool = False


class RerankRequest(_Body):
    query: str
    documents: list[str]
    model: str | None = None
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False
    truncate: bool = False


class Batcher:
    """Runs embed() and rerank() on a worker thread, coalescing the embed requests queued meanwhile."""

    def __init__(self, model, pooling: str | None = None):
        self.model, self.pooling = model, pooling
        self.jobs: queue.Queue = queue.Queue()
        self.calls = 0  # embed() calls made: fewer than requests when requests arrive together
        threading.Thread(target=self._work, name="piegpu-embeddings", daemon=True).start()

    async def embed(self, inputs: list, truncate: bool) -> np.ndarray:
        """Raw pooled rows [len(inputs), dim] of the inputs (neither normalized nor cut)."""
        return await self._submit(("embed", inputs, truncate))

    async def rerank(self, query: str, documents: list, truncate: bool) -> list:
        """The model's score of each document."""
        return await self._submit(("rerank", (query, documents), truncate))

    async def _submit(self, job: tuple):
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self.jobs.put((*job, loop, done))
        return await done

    def _work(self) -> None:
        while True:
            jobs = [self.jobs.get()]
            while True:
                try:
                    jobs.append(self.jobs.get_nowait())
                except queue.Empty:
                    break
            for kind, payload, truncate, loop, done in jobs:
                if kind == "rerank":
                    self._run([(loop, done)], lambda: self.model.rerank(*payload, truncate=truncate))
            for truncate in {j[2] for j in jobs if j[0] == "embed"}:
                group = [j for j in jobs if j[0] == "embed" and j[2] == truncate]
                if len(group) == 1 or not self._coalesced(group, truncate):
                    for _, inputs, _, loop, done in group:  # alone (or again alone: one bad input fails only its own)
                        self._run([(loop, done)], lambda inputs=inputs: self._embed(inputs, truncate))

    def _embed(self, inputs: list, truncate: bool) -> np.ndarray:
        return self.model.embed(inputs, normalize=False, pooling=self.pooling, truncate=truncate)

    def _coalesced(self, group: list, truncate: bool) -> bool:
        """One embed() over every request of `group`, each answered its rows; False (nothing answered) if it failed."""
        try:
            out = self._embed([x for j in group for x in j[1]], truncate)
        except Exception:  # noqa: BLE001 (some request's input is bad: each runs alone to tell whose)
            return False
        self.calls += 1
        at = 0
        for _, inputs, _, loop, done in group:
            loop.call_soon_threadsafe(_settle, done, out[at: at + len(inputs)])
            at += len(inputs)
        return True

    def _run(self, waiters: list, call) -> None:
        try:
            value = call()
            self.calls += 1
        except Exception as e:  # noqa: BLE001 (the request's own error, raised where it awaits)
            value = e
        for loop, done in waiters:
            loop.call_soon_threadsafe(_settle, done, value)


def _settle(done: asyncio.Future, value) -> None:
    if done.done():
        return
    if isinstance(value, BaseException):
        done.set_exception(value)
    else:
        done.set_result(value)


def _inputs(x, param: str) -> list:
    """A request's input as a list of inputs (a string or token ids each), at most MAX_INPUTS."""
    if isinstance(x, str):
        return [x]
    if x and all(isinstance(v, int) for v in x):
        return [list(x)]
    if not x:
        raise ServerError(400, f"'{param}' is empty. Fix: give at least one string or token id list", param)
    if len(x) > MAX_INPUTS:
        raise ServerError(400, f"'{param}' has {len(x)} inputs; at most {MAX_INPUTS} a request", param)
    return list(x)


def _tokens(model, inputs: list) -> int:
    """Tokens of the inputs as the model counts them (usage)."""
    return sum(len(x) if isinstance(x, list) else len(model.tokenizer.encode(x).ids) for x in inputs)


class EmbeddingRoutes:
    """The embedding and rerank routes over one model (an EncoderModel, or the served decoder)."""

    def __init__(self, model, model_id: str, api_key: str | None, pooling: str | None = None):
        self.model, self.model_id, self.api_key = model, model_id, api_key
        self.batcher = Batcher(model, pooling)

    def check(self, request: Request, model: str | None) -> None:
        """401 without the API key (outside /v1 too: llama.cpp's routes), 404 for another model's name."""
        if self.api_key is not None and request.headers.get("authorization", "") != f"Bearer {self.api_key}" \
                and request.headers.get("x-api-key") != self.api_key:
            raise ServerError(401, "Incorrect API key provided.", None, "invalid_api_key")
        if model is not None and model != self.model_id:
            raise ServerError(404, f"The model '{model}' does not exist; this server serves '{self.model_id}'",
                              "model", "model_not_found")

    async def vectors(self, inputs: list, truncate: bool, normalize: bool, dimensions: int | None) -> np.ndarray:
        """The finished embeddings of the inputs (400 for a bad input or option)."""
        hidden = getattr(self.model, "dimensions", None) or self.model.config.hidden_size
        if dimensions is not None and dimensions > hidden:
            raise ServerError(400, f"dimensions {dimensions} exceeds this model's {hidden}", "dimensions")
        try:
            raw = await self.batcher.embed(inputs, truncate)
        except PieGpuError as e:
            raise ServerError(400, str(e), "input") from None
        return finish(raw, normalize, dimensions)

    def register(self, app: FastAPI) -> None:
        """Add /v1/embeddings, /embedding(s), /v1/rerank, /rerank, /v1/reranking to `app`."""

        @app.post("/v1/embeddings", tags=["embeddings"])
        async def embeddings(body: EmbeddingRequest, request: Request):
            """OpenAI embeddings: a string, strings, token ids or lists of them; float or base64 vectors."""
            self.check(request, body.model)
            inputs = _inputs(body.input, "input")
            vecs = await self.vectors(inputs, body.truncate, True, body.dimensions)
            data = [{"object": "embedding", "index": i, "embedding": (
                base64.b64encode(v.astype("<f4").tobytes()).decode() if body.encoding_format == "base64"
                else v.tolist())} for i, v in enumerate(vecs)]
            n = _tokens(self.model, inputs)
            return {"object": "list", "data": data, "model": self.model_id,
                    "usage": {"prompt_tokens": n, "total_tokens": n}}

        async def llama_embedding(body: LlamaEmbeddingRequest, request: Request):
            """llama.cpp's /embedding: [{index, embedding: [vector]}] (pooled), embd_normalize 2 or -1."""
            self.check(request, None)
            if body.embd_normalize not in (-1, 2):
                raise ServerError(400, f"embd_normalize {body.embd_normalize}: piegpu does 2 (Euclidean) or -1 "
                                  "(none)", "embd_normalize")
            vecs = await self.vectors(_inputs(body.content, "content"), body.truncate, body.embd_normalize == 2,
                                      None)
            return [{"index": i, "embedding": [v.tolist()]} for i, v in enumerate(vecs)]

        for path in ("/embedding", "/embeddings"):
            app.add_api_route(path, llama_embedding, methods=["POST"], tags=["llama.cpp"])

        async def rerank(body: RerankRequest, request: Request):
            """Jina / llama.cpp reranking: results sorted by relevance_score, top_n of them."""
            self.check(request, body.model)
            if not hasattr(self.model, "rerank") or not getattr(self.model, "is_reranker", False):
                raise ServerError(400, f"'{self.model_id}' is not a reranker (no cross-encoder head). Fix: serve "
                                  "a reranker such as bge-reranker (piegpu serve -m DIR)", "model")
            try:
                scores = await self.batcher.rerank(body.query, body.documents, body.truncate)
            except PieGpuError as e:
                raise ServerError(400, str(e), "documents") from None
            order = sorted(range(len(scores)), key=lambda i: -scores[i])[:body.top_n]
            results = [{"index": i, "relevance_score": scores[i],
                        **({"document": {"text": body.documents[i]}} if body.return_documents else {})}
                       for i in order]
            n = sum(len(self.model.tokenizer.encode(body.query, d).ids) for d in body.documents)
            return {"model": self.model_id, "object": "list", "results": results,
                    "usage": {"prompt_tokens": n, "total_tokens": n}}

        for path in ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking"):
            app.add_api_route(path, rerank, methods=["POST"], tags=["rerank"])


def build_embedding_app(model, model_id: str, api_key: str | None = None) -> FastAPI:
    """The app serving an encoder alone: /health, /v1/models and the embedding / rerank routes."""
    app = FastAPI(title="piegpu", description="OpenAI-compatible embeddings and reranking of piegpu", version="1")
    routes = EmbeddingRoutes(model, model_id, api_key)
    app.state.embeddings = routes
    created = int(time.time())

    @app.exception_handler(ServerError)
    async def _server_error(request: Request, e: ServerError):
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError):
        msg = "; ".join(f"{'.'.join(str(x) for x in er.get('loc', ()) if x != 'body') or 'body'}: {er.get('msg')}"
                        for er in e.errors()[:5])
        return JSONResponse(error_body(msg), status_code=400)

    @app.get("/health")
    async def health():
        """Whether the model is loaded, and how many embed calls served the requests so far."""
        return {"status": "ok", "model": model_id, "kind": model.info.get("kind"), "calls": routes.batcher.calls}

    @app.get("/v1/models")
    async def models(request: Request):
        """The one model served."""
        routes.check(request, None)
        return {"object": "list", "data": [{"id": model_id, "object": "model", "created": created,
                                            "owned_by": "piegpu", "meta": model.info}]}

    routes.register(app)
    return app
