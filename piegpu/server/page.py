"""The chat page at `GET /` of `piegpu serve`: static files from piegpu/server/static/, no CDN, no build step.

The page talks to the server only through the public OpenAI route (/v1/chat/completions, streamed)
and /health; `GET /chat/config.json` tells it the model id and whether an API key is needed, so it
can ask for the key before its first request instead of provoking a 401.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from .protocol import ChatCompletionRequest, error_body
from .sampling import SAMPLING_FIELDS

TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
# The page renders model text with textContent only; the policy is a second line of defence.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
# Every field the page has a control for (repetition_penalty is vLLM's alias of repeat_penalty).
PAGE_FIELDS = tuple(f for f in SAMPLING_FIELDS if f != "repetition_penalty") + ("seed", "max_tokens", "stop")


def static_files() -> dict:
    """{name: bytes} of the page's files (read once from the installed package)."""
    root = resources.files("piegpu.server").joinpath("static")
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file() and p.name[0] != "."}


def field_ranges() -> dict:
    """{field: {default, ge, gt, le, lt}} of the request fields the page controls (from the pydantic model)."""
    out = {}
    for name in PAGE_FIELDS:
        info = ChatCompletionRequest.model_fields[name]
        spec: dict = {"default": info.default}
        for meta in info.metadata:
            for bound in ("ge", "gt", "le", "lt"):
                if getattr(meta, bound, None) is not None:
                    spec[bound] = getattr(meta, bound)
        out[name] = spec
    return out


def register_page(app: FastAPI, api: Any, api_key: str | None = None) -> None:
    """Serve the chat page at `/` (its files under /chat/) and its config at /chat/config.json."""
    files = static_files()
    config = {"model": api.model_id, "api_key_required": api_key is not None, "ctx": api.engine.ctx,
              "fields": field_ranges()}

    def send(name: str) -> Response:
        kind = TYPES.get(name[name.rfind("."):], "application/octet-stream")
        return Response(files[name], media_type=kind, headers={"Cache-Control": "no-cache",
                                                               "Content-Security-Policy": CSP,
                                                               "X-Content-Type-Options": "nosniff"})

    @app.get("/", include_in_schema=False)
    async def page():
        """The chat page."""
        return send("index.html")

    @app.get("/chat/config.json", include_in_schema=False)
    async def page_config():
        """What the page needs to know before its first request."""
        return config

    @app.get("/chat/{name}", include_in_schema=False)
    async def page_file(name: str):
        """One of the page's static files (404 naming the files there are)."""
        if name not in files:
            return JSONResponse(error_body(f"/chat/{name} is not a file of the chat page; it has "
                                           f"{sorted(files)}. Fix: open / for the page"), status_code=404)
        return send(name)


__all__ = ["register_page", "static_files", "field_ranges"]
