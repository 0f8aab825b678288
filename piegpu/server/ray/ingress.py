"""The ingress: one HTTP endpoint in front of the replicas, with retries and error events on replica failure.

Every path is forwarded as a Routed request through a DeploymentHandle whose request router picks the
replica (router.py), so the OpenAI, llama.cpp and /health routes are all the replica's own (build_app).
When a replica dies under a request:

- a request whose response has not started reaching the client (every non-streaming one, a stream
  before its first chunk) is sent again to another replica, with the seed the ingress pinned, so the
  client gets the output it would have got (it is never run twice: only a dead replica's request is
  retried, and a dead replica sends nothing more);
- a stream that already sent chunks ends with an OpenAI error event (the official client raises
  APIError); the tokens it sent are not taken back.

A replica whose device was lost is alive but cannot serve: it answers DeviceLost (replica.py) before
sending anything, and the request is retried the same way. The ingress then steers every request away
from that replica (Routed.avoid, honoured by both routers in router.py) while another one is left, until
Ray Serve's health check has replaced it.

Ray Serve's controller starts a new replica in the dead one's place. Responses carry
`x-piegpu-replica` (which replica answered) and `x-piegpu-attempts` (1 unless it was retried).
"""

# no `from __future__ import annotations`: serve.ingress re-creates the methods, and FastAPI must see
# the real Request class in their signatures
import asyncio
import json
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.exceptions import RayActorError

from ..protocol import error_body
from .replica import DeviceLost
from .routed import routed_request

ATTEMPTS = 3  # tries per request: the first and up to two retries on other replicas
RETRY_WAIT_S = 0.5  # before a retry: the router learns of the death (a probe fails) in the meantime
AVOID_S = 600.0  # how long requests avoid a replica whose device was lost (Ray replaces it well before)

# no docs or schema routes of its own: /docs and /openapi.json are the replicas' (build_app's), forwarded
app = FastAPI(title="piegpu on Ray Serve", docs_url=None, redoc_url=None, openapi_url=None)


def _sse_error(message: str) -> bytes:
    body = error_body(message, "server_error", None, "replica_failed")
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()


def _replica_died(e: BaseException) -> bool:
    """Whether `e` says the replica cannot run the request (its process is gone, or its device is lost) and
    sent nothing of it, so it can run elsewhere -- not that the request itself failed."""
    return isinstance(e, (RayActorError, DeviceLost))


def _lost_replica(e: BaseException) -> str:
    """The id of the replica whose device was lost, if `e` says so ("" otherwise)."""
    # Ray raises a replica's exception as a RayTaskError that is also an instance of the original class
    return str(getattr(e, "replica", "") or "") if isinstance(e, DeviceLost) else ""


@serve.deployment(name="PiegpuIngress", num_replicas=1, ray_actor_options={"num_cpus": 0},
                  max_ongoing_requests=1024)
@serve.ingress(app)
class Ingress:
    """Forwards every request to a replica chosen by the deployment's request router (see the module docstring)."""

    def __init__(self, replicas, attempts: int = ATTEMPTS):
        self.replicas = replicas  # a DeploymentHandle to PiegpuReplica
        self.attempts = attempts
        self.stats = {"requests": 0, "retried": 0, "streams_broken": 0, "failed": 0, "device_lost": 0}
        self.lost: dict = {}  # replica id -> when it said its device was lost (time.monotonic())

    def _avoid(self) -> tuple:
        """The replicas that said their device was lost in the last AVOID_S seconds."""
        now = time.monotonic()
        for rid in [rid for rid, t in self.lost.items() if now - t > AVOID_S]:
            del self.lost[rid]
        return tuple(self.lost)

    async def _start(self, req):
        """Send req to a replica; returns (generator, head, first body chunk or None)."""
        gen = self.replicas.options(stream=True, method_name="http").remote(req)
        head = await gen.__anext__()
        first = None
        try:
            first = await gen.__anext__()
        except StopAsyncIteration:
            pass
        return gen, head, first

    @app.get("/ray/stats")
    async def ray_stats(self) -> dict:
        """The ingress's counters: requests, retries, streams ended by a replica's failure, lost devices met;
        and the replicas requests avoid now (`avoiding`: their device was lost)."""
        return {**self.stats, "avoiding": list(self._avoid())}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def forward(self, path: str, request: Request):
        """Any other path: answered by a replica's OpenAI app."""
        body = await request.body()
        req = routed_request(request.method, "/" + path, request.url.query.encode(),
                             list(request.headers.items()), body)
        self.stats["requests"] += 1
        last = None
        for attempt in range(1, self.attempts + 1):
            req.avoid = self._avoid()
            try:
                gen, head, first = await self._start(req)
                if req.stream and head["status"] == 200:
                    return self._relay(gen, head, first, attempt)
                chunks = [first] if first is not None else []
                async for chunk in gen:
                    chunks.append(chunk)
                return Response(b"".join(chunks), status_code=head["status"], headers=self._headers(head, attempt))
            except Exception as e:  # noqa: BLE001 -- sorted below
                if not _replica_died(e):
                    raise
                last = e
                lost = _lost_replica(e)
                if lost:
                    self.stats["device_lost"] += 1
                    self.lost[lost] = time.monotonic()
                if attempt < self.attempts:
                    self.stats["retried"] += 1
                    await asyncio.sleep(RETRY_WAIT_S)
        self.stats["failed"] += 1
        return JSONResponse(error_body(f"{self.attempts} replicas failed under this request (the last: "
                                       f"{type(last).__name__}). Ray Serve is replacing them; retry shortly.",
                                       "server_error", None, "replica_failed"),
                            status_code=503, headers={"Retry-After": "1"})

    @staticmethod
    def _headers(head: dict, attempt: int) -> dict:
        hdrs = {k: v for k, v in head["headers"] if k.lower() not in ("content-length", "transfer-encoding")}
        hdrs["x-piegpu-replica"] = head.get("replica", "")
        hdrs["x-piegpu-attempts"] = str(attempt)
        return hdrs

    def _relay(self, gen, head: dict, first, attempt: int) -> StreamingResponse:
        """The replica's event stream, chunk by chunk; an error event if the replica dies on the way."""
        async def chunks():
            if first is not None:
                yield first
            try:
                async for chunk in gen:
                    yield chunk
            except Exception as e:  # noqa: BLE001 -- the client hears it as an event
                self.stats["streams_broken"] += 1
                cause = (f"the replica serving it died ({type(e).__name__})" if _replica_died(e)
                         else f"{type(e).__name__}: {e}")
                yield _sse_error(f"The stream was cut off: {cause}. The tokens sent so far stand; send the "
                                 "request again to get a whole answer (Ray Serve is replacing the replica).")
        hdrs = self._headers(head, attempt)
        media = hdrs.pop("content-type", "text/event-stream")
        return StreamingResponse(chunks(), status_code=head["status"], media_type=media, headers=hdrs)
