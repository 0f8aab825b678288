"""One Ray Serve replica: one piegpu engine on one device, answering through `piegpu serve`'s own FastAPI app.

The ingress hands each request over as a Routed (method, path, headers, body); `http` runs it through
build_app's ASGI app in this process and yields the response as it is produced: first a head
({"status", "headers", "replica"}), then body chunks (an event stream chunk by chunk). Ray Serve's
health check calls `check_health` every few seconds: an engine thread that died (a lost device
ends it: the next pass raises DeviceError) makes the replica unhealthy, and the controller replaces
it with a fresh process (after 3 failed checks in a row: Ray's threshold). Until then `http` raises
DeviceLost for every request whose response has not left the replica -- the one whose pass met the
lost device too -- so the ingress runs it on another replica instead of answering it with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import AsyncIterator

from ...model.kv_pool import DEFAULT_KV_DTYPE
from .routed import Routed


class DeviceLost(RuntimeError):
    """This replica's engine cannot run any more (its message says why); Ray Serve replaces the replica.

    `replica` is the replica's id (x-piegpu-replica): the ingress steers requests away from it meanwhile."""

    def __init__(self, message: str, replica: str = ""):
        super().__init__(message)
        self.replica = replica


class AsgiCall:
    """Drive an ASGI app with one request held in memory, yielding its response messages as they come."""

    def __init__(self, app, req: Routed):
        self.app, self.req = app, req
        self.out: asyncio.Queue = asyncio.Queue()
        self.gone = asyncio.Event()  # set when the caller stops listening: the app sees http.disconnect
        self._sent_body = False

    def scope(self) -> dict:
        """The ASGI HTTP scope of the request."""
        r = self.req
        return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                "method": r.method, "scheme": "http", "path": r.path, "raw_path": r.path.encode(),
                "root_path": "", "query_string": r.query,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in r.headers]
                + [(b"content-length", str(len(r.body)).encode())],
                "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 80), "state": {}}

    async def receive(self) -> dict:
        """ASGI receive: the whole body at once, then http.disconnect once the caller has gone."""
        if not self._sent_body:
            self._sent_body = True
            return {"type": "http.request", "body": self.req.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        """ASGI send: queued for messages()."""
        await self.out.put(message)

    async def messages(self):
        """Yield the head dict, then body bytes, until the response is complete."""
        task = asyncio.ensure_future(self.app(self.scope(), self.receive, self.send))
        task.add_done_callback(lambda _t: self.out.put_nowait(None))
        try:
            while True:
                msg = await self.out.get()
                if msg is None:
                    task.result()  # raises what the app raised
                    return
                if msg["type"] == "http.response.start":
                    yield {"status": msg["status"],
                           "headers": [(k.decode("latin-1"), v.decode("latin-1")) for k, v in msg.get("headers", [])]}
                elif msg["type"] == "http.response.body":
                    if msg.get("body"):
                        yield bytes(msg["body"])
                    if not msg.get("more_body", False):
                        return
        finally:
            self.gone.set()  # a cancelled caller (client gone): the app cancels its jobs
            if not task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(task), 5.0)
                except (asyncio.TimeoutError, Exception):  # noqa: BLE001 -- cleanup only
                    task.cancel()


class PiegpuReplica:
    """Loads the model, starts an Engine and builds the OpenAI app (see the module docstring)."""

    def __init__(self, model_path: str | None = None, model_id: str | None = None, max_batch: int = 16,
                 max_queue: int = 64, ctx: int | None = None, kv_mb: float | None = None,
                 cache_mb: float = 512.0, window: int | None = None, api_key: str | None = None,
                 max_body: int = 4 << 20, env: dict | None = None, kv_dtype: str = DEFAULT_KV_DTYPE,
                 max_pass_tokens: int | None = None):
        for k, v in (env or {}).items():  # before the device opens (LP_NUM_THREADS is read then)
            os.environ[k] = str(v)
        from ...textgen.model import load_model
        from .. import build_app, served_model_id
        from ..engine import Engine
        from ..grammar import Constraints
        self.model = load_model(model_path, verbose=False, kv_mb=kv_mb, kv_dtype=kv_dtype, context=ctx)
        with _asyncio_policy():
            self.engine = Engine(self.model, max_batch=max_batch, max_queue=max_queue, ctx=ctx, cache_mb=cache_mb,
                                 window=window, max_pass_tokens=max_pass_tokens)
        self.model_id = model_id or served_model_id(self.model, model_path)
        self.app = build_app(self.engine, self.model_id, api_key=api_key, max_body=max_body,
                             constraints=Constraints(self.model))
        self.engine.start()
        self.name = _replica_name()

    async def http(self, req: Routed) -> AsyncIterator[dict | bytes]:
        """Answer one request through the OpenAI app: a head dict, then the body in chunks (DeviceLost instead,
        before any of it, when the engine cannot run the request: the ingress sends it to another replica)."""
        self._raise_if_lost("it was not run")
        head = None  # held back until the first body chunk: a response that met a lost device is not sent
        async for item in AsgiCall(self.app, req).messages():
            if isinstance(item, dict):
                head = {**item, "replica": self.name}
                continue
            if head is not None:
                self._raise_if_lost("its response was not sent")
                yield head
                head = None
            yield item
        if head is not None:  # a response without a body
            self._raise_if_lost("its response was not sent")
            yield head

    def _raise_if_lost(self, what: str) -> None:
        """DeviceLost (naming this replica) if the engine cannot run requests any more."""
        problem = self.health_problem()
        if problem is not None:
            raise DeviceLost(f"piegpu replica {self.name} cannot serve this request ({what}): {problem}",
                             self.name)

    def health_problem(self) -> str | None:
        """Why this replica cannot serve (a dead engine thread, a lost device), or None when it can."""
        err = self.engine.error
        if err is not None:
            from ...runtime.device import lost_device_error
            lost = lost_device_error(err, "the engine's last pass")
            return str(lost) if lost is not None else f"the engine stopped: {type(err).__name__}: {err}"
        if self.model.closed:
            return "the model's device buffers were released"
        return None

    def check_health(self) -> None:
        """Ray Serve's health check: raise (the replica is replaced) when health_problem() says why."""
        problem = self.health_problem()
        if problem is not None:
            raise DeviceLost(f"piegpu replica {self.name} is unhealthy: {problem}. Ray Serve replaces it with a "
                             "fresh process (a lost device cannot be reused in this one)", self.name)

    def __del__(self):
        # Ray Serve calls this when it stops the replica: cancel what runs, end the engine thread
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.stop(0.0)


@contextlib.contextmanager
def _asyncio_policy():
    """Make new event loops plain asyncio ones for a while: Ray installs uvloop's policy in its workers, and
    wgpu-py finds the running loop's library through the async generator hooks -- on a uvloop loop it looks
    for `uvloop.Event` and fails -- so the engine thread's loop must be asyncio's own."""
    policy = asyncio.get_event_loop_policy()
    if not type(policy).__module__.startswith("uvloop"):
        yield
        return
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(policy)


def _replica_name() -> str:
    """This replica's id in Ray Serve (its actor's name ends with it), or the process id outside Serve."""
    try:
        from ray import serve
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 -- not inside a Serve replica (tests of the class itself)
        return f"pid{os.getpid()}"
