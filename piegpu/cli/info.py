"""`piegpu info` and `piegpu bench`: the adapter, and the benchmark table."""

from __future__ import annotations

import os


def _cmd_info(args) -> int:
    from ..runtime.device import describe_adapters, get_device
    from ..paths import cache_dir
    print("adapters:")
    for summary, info in describe_adapters():
        print(f"  {summary}  [{info.get('adapter_type', '')}, {info.get('backend_type', '')}]")
    d = get_device()
    print(f"chosen: {d.name} via {d.backend} ({d.adapter_type})")
    print("  override with PIEGPU_ADAPTER=<name substring> or PIEGPU_BACKEND=vulkan|metal|dx12|gl")
    lp = os.environ.get("LP_NUM_THREADS")
    if d.is_cpu:
        how = "set by piegpu to the core count" if d.lp_threads_default else "from the environment"
        print(f"LP_NUM_THREADS: {lp} ({how}; lavapipe's default keeps about one core busy)")
    print("features: " + ", ".join(d.features))
    print("limits:")
    for k in sorted(d.limits):
        if "compute" in k or "storage" in k or "uniform" in k or "buffer-size" in k:
            print(f"  {k}: {d.limits[k]}")
    print(f"cache dir: {cache_dir()}")
    _kv_pool_line(d)
    return 0


def _kv_pool_line(d) -> None:
    """The default model's KV pool on this adapter: size, pages, page bytes, where the pages live."""
    from ..model.default import default_gguf_path
    from ..model.gguf_model import open_gguf_model
    from ..model.kv_pool import DEFAULT_KV_DTYPE, PAGE_TOKENS, default_kv_mb, kv_bytes_per_position, resolve_context
    try:
        c = open_gguf_model(default_gguf_path()).config
    except Exception as e:  # noqa: BLE001 -- info still reports the adapter
        print(f"KV pool: unknown (the default model could not be read: {e})")
        return
    limit = d.limits.get("max-storage-buffer-binding-size", 128 << 20)
    ctx = resolve_context(c, None, d.is_cpu, DEFAULT_KV_DTYPE, limit)
    mb = default_kv_mb(c, d.is_cpu, DEFAULT_KV_DTYPE, ctx)
    print(f"context of the default model: {ctx} positions by default of its {c.max_position_embeddings} "
          "(load_model(context=N), piegpu generate/serve -c N)")
    per_page = kv_bytes_per_position(c, DEFAULT_KV_DTYPE) * PAGE_TOKENS
    print(f"KV pool of the default model: {mb} MiB by default (load_model(kv_mb=...), piegpu serve --kv-mb): "
          f"{mb * (1 << 20) // per_page} pages of {PAGE_TOKENS} positions, {per_page // 1024} KiB each "
          f"({DEFAULT_KV_DTYPE} K and V), in storage buffers; with --kv-dtype f32 (load_model(kv_dtype='f32')) "
          f"exact values, twice the bytes a page{', in textures' if d.texture_weights else ''}")


def _cmd_bench(args) -> int:
    from ..bench.table import main as bench_main
    return bench_main(args)


def add_parser(sub) -> None:
    """Register `piegpu info` and `piegpu bench` on the subparsers `sub`."""
    i = sub.add_parser("info", help="the adapter, its features and limits, and the cache dir")
    i.set_defaults(func=_cmd_info)
    b = sub.add_parser("bench", help="print the benchmark table")
    b.add_argument("--json", action="store_true", help="machine-readable output")
    b.add_argument("--tokens", type=int, default=63, help="decode tokens per measurement")
    b.add_argument("--runs", type=int, default=3, help="runs per measurement (the median is reported)")
    b.add_argument("--quick", action="store_true", help="fewer tokens and runs (a smoke test)")
    b.add_argument("--gguf", action="append", default=[], metavar="PATH",
                   help="also decode this GGUF with piegpu and llama.cpp (llama-cpp-python), each in a process of its "
                        "own, at --ctx: ms/token, load time, peak RSS (repeatable; benchmarks/real_shapes.py builds "
                        "real-shape files)")
    b.add_argument("--ctx", type=int, default=512, help="the context both engines load --gguf files with (512)")
    b.add_argument("--only-gguf", action="store_true", help="skip the default model's table, only the --gguf rows")
    b.set_defaults(func=_cmd_bench)
