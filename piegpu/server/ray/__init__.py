"""piegpu on Ray Serve: N replicas (one engine on one device each) behind one OpenAI endpoint.

    pip install 'piegpu[ray]'
    piegpu serve --ray --replicas 2                        # a local Ray instance
    piegpu serve --ray --replicas 4 --address HEAD:6379    # a running cluster (`ray start --head`)

`build()` returns the Ray Serve application: an ingress (ingress.py) that forwards every request to a
PiegpuReplica (replica.py, `piegpu serve`'s own FastAPI app in each replica) through a request router
that keeps prompts sharing a prefix on the replica holding its KV (router.py). `run()` is what the
CLI does: check the address, start or join Ray, deploy, serve until SIGINT/SIGTERM.
Nothing here imports ray at module level: `import piegpu.server.ray` works without it.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Callable

from ...errors import PieGpuError
from ...model.kv_pool import DEFAULT_KV_DTYPE

if TYPE_CHECKING:
    from ray.serve import Application

APP_NAME = "piegpu"
INSTALL_HINT = "Fix: pip install 'piegpu[ray]' (Ray Serve: ray[serve])"


class RayError(PieGpuError):
    """Ray is missing, or the cluster cannot be reached or cannot hold the replicas (the message says the fix)."""


def require_ray() -> None:
    """RayError with the install command unless ray[serve] is importable."""
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as e:
        raise RayError(f"piegpu serve --ray needs Ray Serve, which is not installed ({e}). {INSTALL_HINT}") from None


def check_address(address: str | None, timeout_s: float = 3.0) -> None:
    """RayError unless `address` (HOST:PORT or ray://HOST:PORT; None or "auto": nothing to check) accepts TCP."""
    if address is None or address == "auto":
        return
    hostport = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = hostport.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayError(f"--address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379, the address `ray start "
                       "--head` prints, or ray://HOST:10001 for Ray Client). Fix: pass the head node's address")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise RayError(f"cannot reach a Ray cluster at {address} ({e.strerror or e}). Fix: start the head node "
                       "there with `ray start --head --port PORT`, check the host, port and firewall, or drop "
                       "--address to start a local Ray instance") from None


def build(model: str | None = None, replicas: int = 2, *, model_id: str | None = None, affinity: bool = True,
          imbalance: int | None = None, num_cpus: float = 1.0, num_gpus: float = 0.0,
          autoscaling: dict | None = None, env: dict | None = None, max_batch: int = 16, max_queue: int = 64,
          ctx: int | None = None, kv_mb: float | None = None, kv_dtype: str = DEFAULT_KV_DTYPE, cache_mb: float = 512.0,
          window: int | None = None, api_key: str | None = None, max_body: int = 4 << 20, max_pass_tokens: int | None = None,
          health_check_period_s: float = 5.0,
          health_check_timeout_s: float = 60.0) -> "Application":
    """The Ray Serve application: the ingress bound to `replicas` PiegpuReplicas (or an autoscaling config).

    Ray Serve checks each replica's health every `health_check_period_s` seconds (a check not answered in
    `health_check_timeout_s` fails) and replaces a replica after 3 failed checks in a row: a replica whose
    device is lost is replaced about 3 periods after a request first meets the loss."""
    require_ray()
    if replicas < 1 and autoscaling is None:
        raise RayError(f"replicas must be >= 1, got {replicas}. Fix: --replicas 1 or more")
    for name, v in (("health_check_period_s", health_check_period_s),
                    ("health_check_timeout_s", health_check_timeout_s)):
        if not v > 0:
            raise RayError(f"{name} must be > 0 seconds, got {v}. Fix: a positive number of seconds")
    from ray import serve

    from .ingress import Ingress
    from .replica import PiegpuReplica
    from .router import IMBALANCE, router_config
    scale = {"autoscaling_config": autoscaling} if autoscaling is not None else {"num_replicas": replicas}
    deployment = serve.deployment(
        PiegpuReplica, name="PiegpuReplica", ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus},
        max_ongoing_requests=max_queue, health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s,
        request_router_config=router_config(affinity, IMBALANCE if imbalance is None else imbalance), **scale)
    replica = deployment.bind(model, model_id, max_batch=max_batch, max_queue=max_queue, ctx=ctx, kv_mb=kv_mb,
                              kv_dtype=kv_dtype, cache_mb=cache_mb, window=window, api_key=api_key, max_body=max_body, env=env,
                              max_pass_tokens=max_pass_tokens)
    return Ingress.bind(replica)


def connect(address: str | None, host: str = "127.0.0.1", port: int = 8000) -> bool:
    """Join the cluster at `address` or start a local Ray instance, and start Serve's HTTP proxy on host:port;
    True if this process started Ray (and so should stop it)."""
    import ray
    from ray import serve
    check_address(address)
    local = address is None
    if local:
        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1", configure_logging=False)
    else:
        ray.init(address=address, configure_logging=False)
    serve.start(http_options={"host": host, "port": port}, logging_config={"log_level": "WARNING"})
    return local


def check_room(replicas: int, num_cpus: float, num_gpus: float) -> None:
    """RayError when the cluster has fewer CPUs or GPUs than the replicas reserve (they would wait forever)."""
    import ray
    have = ray.cluster_resources()
    for what, each, flag in (("CPU", num_cpus, "--replica-cpus"), ("GPU", num_gpus, "--replica-gpus")):
        need = replicas * each
        if need > have.get(what, 0.0) + 1e-9:
            raise RayError(f"{replicas} replicas reserve {need:g} {what}s ({each:g} each) but the Ray cluster has "
                           f"{have.get(what, 0.0):g}. Fix: fewer --replicas, a smaller {flag}, or more nodes "
                           "(`ray start --address HEAD:PORT` on each)")


def run(app: "Application", address: str | None, host: str, port: int, replicas: int, num_cpus: float,
        num_gpus: float, log: Callable[[str], None]) -> int:
    """Deploy `app` (from build()) on Ray and serve it until SIGINT/SIGTERM; the CLI's `piegpu serve --ray`."""
    import signal
    import threading

    import ray
    from ray import serve
    local = connect(address, host, port)
    deployed = False
    try:
        check_room(replicas, num_cpus, num_gpus)
        log(f"piegpu: Ray cluster at {ray.get_runtime_context().gcs_address} ({'local' if local else 'joined'}); "
            f"starting {replicas} replica(s)")
        deployed = True
        serve.run(app, name=APP_NAME, route_prefix="/")
        log(f"piegpu: serving on http://{host}:{port}/v1 from {replicas} Ray Serve replica(s)")
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        while not done.wait(1.0):
            pass
    finally:
        try:
            if deployed:
                serve.delete(APP_NAME)
            if local:
                serve.shutdown()
        finally:
            ray.shutdown()
    return 0


__all__ = ["build", "run", "connect", "check_address", "check_room", "require_ray", "RayError", "APP_NAME"]
