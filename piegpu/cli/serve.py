"""`piegpu serve`: the OpenAI-compatible HTTP server."""

from __future__ import annotations

import sys

from ..model.kv_pool import DEFAULT_KV_DTYPE
from .common import MODEL_HELP, add_context_arg, int_at_least


def model_id(model, path: str | None) -> str:
    """The id the server answers to: the model folder's or file's name (the default model's own name)."""
    from ..server import served_model_id
    return served_model_id(model, path)


def _megabytes(text: str) -> float:
    """An argparse type: a size in MiB >= 0."""
    import argparse
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size in MiB: {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 MiB, got {text}")
    return v


def _positive_megabytes(text: str) -> float:
    """An argparse type: a size in MiB > 0."""
    import argparse
    v = _megabytes(text)
    if v == 0:
        raise argparse.ArgumentTypeError("must be > 0 MiB, got 0")
    return v


def _positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    import argparse
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return v


def _cmd_serve_ray(args) -> int:
    """`piegpu serve --ray`: the same routes from N Ray Serve replicas (piegpu.server.ray)."""
    import os

    from ..server import ray as on_ray
    if args.lora or args.max_loras:
        args.parser.error("--lora and --max-loras are not wired into --ray replicas yet. Fix: serve adapters "
                          "without --ray (one engine), or load them with POST /v1/load_lora_adapter per replica")
    on_ray.require_ray()
    on_ray.check_address(args.address)  # before anything starts
    replicas = args.replicas or 1
    autoscaling = None
    if args.max_replicas is not None:
        if args.max_replicas < replicas:
            args.parser.error(f"--max-replicas {args.max_replicas} is below --replicas {replicas}. Fix: "
                              "--max-replicas at least --replicas (autoscaling between the two)")
        autoscaling = {"min_replicas": replicas, "initial_replicas": replicas, "max_replicas": args.max_replicas,
                       "target_ongoing_requests": args.max_batch}  # a replica's batch full: time for another
    env = {"LP_NUM_THREADS": os.environ["LP_NUM_THREADS"]} if "LP_NUM_THREADS" in os.environ else None
    # replicas load the model in processes of their own (maybe on other nodes, at the same path): an absolute path
    model = os.path.abspath(args.model) if args.model and os.path.exists(args.model) else args.model
    app = on_ray.build(model, replicas, model_id=args.model_id, affinity=not args.no_affinity,
                       num_cpus=args.replica_cpus, num_gpus=args.replica_gpus, autoscaling=autoscaling, env=env,
                       max_batch=args.max_batch, max_queue=args.max_queue, ctx=args.ctx, kv_mb=args.kv_mb,
                       kv_dtype=args.kv_dtype, cache_mb=args.cache_mb, window=args.window, api_key=args.api_key, max_body=args.max_body,
                       max_pass_tokens=args.max_pass_tokens,
                       **({"health_check_period_s": args.health_check_s} if args.health_check_s else {}))
    return on_ray.run(app, args.address, args.host, args.port, replicas, args.replica_cpus, args.replica_gpus,
                      lambda msg: print(msg, file=sys.stderr, flush=True))


def _lora_arg(value: str) -> tuple:
    """--lora NAME=PATH -> (NAME, PATH)."""
    import argparse
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected NAME=PATH (e.g. --lora sql=./sql-lora)")
    return name, path


def _cmd_serve(args) -> int:
    if args.ray:
        return _cmd_serve_ray(args)
    given = [flag for flag, v in (("--replicas", args.replicas), ("--address", args.address),
                                  ("--max-replicas", args.max_replicas), ("--no-affinity", args.no_affinity),
                                  ("--health-check-s", args.health_check_s)) if v]
    if given:
        args.parser.error(f"{' and '.join(given)} only work with --ray. Fix: add --ray (pip install "
                          "'piegpu[ray]') or drop them")
    from ..textgen.model import load_model
    from ..server import serve
    if not sys.stderr.isatty():  # a server's stderr is a log: progress as lines
        from ..runtime.progress import as_lines
        as_lines()
    model = load_model(args.model, verbose=True, kv_mb=args.kv_mb, kv_dtype=args.kv_dtype, context=args.ctx,
                       max_loras=args.max_loras)
    return serve(model, loras=args.lora, host=args.host, port=args.port, max_batch=args.max_batch,
                 max_queue=args.max_queue,
                 api_key=args.api_key, ctx=args.ctx, model_id=args.model_id or model_id(model, args.model),
                 cache_mb=args.cache_mb, grace_s=args.grace, window=args.window, max_body=args.max_body,
                 log_level="info" if args.verbose else "warning", max_pass_tokens=args.max_pass_tokens,
                 pooling=args.pooling)


def add_parser(sub) -> None:
    """Register `piegpu serve` on the subparsers `sub`."""
    s = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions)")
    s.add_argument("-m", "--model", default=None, help=MODEL_HELP)
    s.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1: this machine only)")
    s.add_argument("--port", type=int_at_least(0, 65536), default=8000)
    s.add_argument("--max-batch", type=int_at_least(1), default=16, help="sequences decoded per pass (16)")
    s.add_argument("--window", type=int_at_least(1, 9), default=None,  # 9: runtime.window.MAX_WINDOW + 1
                   help="decode passes run ahead per host read (default: the adapter's best; 1 on lavapipe)")
    s.add_argument("--max-pass-tokens", type=int_at_least(1, 257), default=None, metavar="N",  # 257: the largest+1
                   help="prompt tokens one prefill pass takes at most, 1-256 (default: 64 on CPU adapters, 256 on "
                        "GPUs): running rows wait for one such pass between two of their tokens while prompts are "
                        "prefilled")
    s.add_argument("--max-queue", type=int_at_least(1), default=64,
                   help="requests queued or running before HTTP 429 (64)")
    s.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1/")
    add_context_arg(s)
    s.add_argument("--kv-mb", type=_positive_megabytes, default=None, metavar="MB",
                   help="the KV page pool every sequence draws from, in MiB (default: two whole contexts, at most "
                        "1 GiB, an eighth of RAM on CPU adapters); requests wait while it is full")
    s.add_argument("--kv-dtype", choices=["f32", "f16"], default=DEFAULT_KV_DTYPE,
                   help="how K and V are stored: f16 (default: half the bytes, so twice the positions in --kv-mb; "
                        "values rounded to half precision) or f32 (exact)")
    s.add_argument("--cache-mb", type=_megabytes, default=512.0, metavar="MB",
                   help="most KV pages kept for prefix reuse, in MiB of the pool (512; 0 = off)")
    s.add_argument("--grace", type=float, default=5.0, help="seconds streams get to finish on shutdown (5)")
    s.add_argument("--max-body", type=int_at_least(1024), default=4 << 20, metavar="BYTES",
                   help="largest request body accepted; larger ones get HTTP 413 (4 MiB)")
    s.add_argument("--model-id", default=None, help="the model name clients use (default: from the path)")
    s.add_argument("--lora", action="append", type=_lora_arg, default=[], metavar="NAME=PATH",
                   help="a LoRA adapter (PEFT folder or GGUF LoRA) served as model id NAME; repeatable")
    s.add_argument("--max-loras", type=int_at_least(1), default=None, metavar="N",
                   help="LoRA adapters resident on the device at once (8); more are swapped in, least recent first")
    s.add_argument("--pooling", choices=["mean", "last", "cls", "max"], default=None,
                   help="how /v1/embeddings pools a decoder's hidden rows (default: the model's sentence-transformers "
                        "or GGUF pooling config; a chat model has none). An encoder directory (-m BERT_DIR) is served "
                        "for embeddings / reranking alone, pooled as its own config says")
    s.add_argument("--verbose", action="store_true", help="log every request")
    r = s.add_argument_group("scale-out on Ray Serve (pip install 'piegpu[ray]')")
    r.add_argument("--ray", action="store_true", help="serve from Ray Serve replicas, one engine each")
    r.add_argument("--replicas", type=int_at_least(1), default=None, help="replicas with --ray (1)")
    r.add_argument("--max-replicas", type=int_at_least(1), default=None, metavar="M",
                   help="autoscale between --replicas and M replicas on requests in flight (--max-batch each)")
    r.add_argument("--address", default=None, metavar="ADDR",
                   help="a running Ray cluster (HEAD:6379 from `ray start --head`); default: a local instance")
    r.add_argument("--replica-cpus", type=float, default=1.0, help="CPUs Ray reserves per replica (1)")
    r.add_argument("--replica-gpus", type=float, default=0.0, help="GPUs Ray reserves per replica (0; 1 on GPUs)")
    r.add_argument("--no-affinity", action="store_true",
                   help="route by load only (Ray's power of two choices), not by shared prompt prefixes")
    r.add_argument("--health-check-s", type=_positive_seconds, default=None, metavar="S",
                   help="seconds between Ray Serve's health checks of a replica (5); a replica whose device is "
                        "lost is replaced after 3 failed checks")
    s.set_defaults(func=_cmd_serve, parser=s)
