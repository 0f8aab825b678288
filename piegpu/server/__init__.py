"""`piegpu serve`: an OpenAI-compatible HTTP server (FastAPI on uvicorn) with continuous batching.

engine.py runs the model on its own thread (every active request a row of one decode pass,
sampler parameters as device data, KV prefixes reused from finished requests); app.py maps
the OpenAI API onto it; protocol.py holds the request bodies and the error shape.
"""

from __future__ import annotations

import signal
import sys

from .app import build_app
from .engine import Engine

__all__ = ["build_app", "Engine", "serve", "served_model_id"]


def served_model_id(model, path: str | None) -> str:
    """The id the server answers to: the name it was loaded by (org/repo:Q4_K_M, ollama:llama3.2:1b), else the model
    folder's or file's name (the default model's own name)."""
    import re
    from pathlib import Path
    info = getattr(model, "info", None) or {}
    if info.get("origin") in ("hf", "ollama", "lmstudio"):
        return info["name"]
    name = Path(path or model.source).name
    name = re.sub(r"\.gguf$", "", name)
    return re.sub(r"-[0-9a-f]{12}$", "", name)  # the converted-model cache folder's content hash


def serve(model, host: str = "127.0.0.1", port: int = 8000, max_batch: int = 16, max_queue: int = 64,
          api_key: str | None = None, ctx: int | None = None, model_id: str | None = None,
          cache_mb: float = 512.0, grace_s: float = 5.0, max_body: int = 4 << 20, log_level: str = "warning",
          window: int | None = None, max_pass_tokens: int | None = None, loras: list | None = None,
          pooling: str | None = None) -> int:
    """Serve `model` until SIGINT/SIGTERM: streams in flight get grace_s seconds to finish, then are cancelled.

    `loras`: [(name, path)] LoRA adapters loaded first, each served as a model id (piegpu serve --lora NAME=PATH).
    An EncoderModel is served alone (embeddings and reranking, server/embeddings.py); a decoder's /v1/embeddings
    pool by `pooling` (default: the model's own configuration).
    """
    import uvicorn
    name = model_id or "default"
    if not hasattr(model, "generate"):  # an encoder: no generation engine
        from .embeddings import build_embedding_app
        app = build_embedding_app(model, name, api_key=api_key)
        print(f"piegpu: serving {name} ({model.info.get('kind')}) on http://{host}:{port}/v1", file=sys.stderr,
              flush=True)
        uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off")).run()
        return 0
    for lname, path in loras or []:
        model.load_adapter(path, name=lname)

    from .grammar import Constraints
    engine = Engine(model, max_batch=max_batch, max_queue=max_queue, ctx=ctx, cache_mb=cache_mb, window=window,
                    max_pass_tokens=max_pass_tokens)
    app = build_app(engine, name, api_key=api_key, max_body=max_body, constraints=Constraints(model), pooling=pooling)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=grace_s + 2,
                            lifespan="off")

    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            # Streams end (finished, or cancelled after grace_s) so connections can close. Unlike
            # uvicorn's own handler this does not re-raise the signal after shutdown: a clean
            # shutdown on SIGINT/SIGTERM exits 0.
            engine.begin_stop(grace_s)
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True  # a second Ctrl-C
            self.should_exit = True

    server = _Server(config)
    engine.start()
    print(f"piegpu: serving {name} on http://{host}:{port}/v1 (max batch {max_batch}, window {engine.batch.window})", file=sys.stderr, flush=True)
    try:
        server.run()
    finally:
        engine.stop(0.0)
    return 0
