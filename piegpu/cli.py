"""The piegpu command line: generate, compile, info, bench."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

from .errors import PieGpuError


def _cmd_generate(args) -> int:
    from .model.loaded import load_model
    model = load_model(args.model, verbose=True)
    value = {"top-k": args.top_k, "top-p": args.top_p, "min-p": args.min_p, "top-a": args.top_a}.get(args.sampler)
    t0 = time.perf_counter()
    g = model.generate(args.prompt, max_tokens=args.max_tokens, sampler=args.sampler, temperature=args.temperature,
                       seed=args.seed, chat=args.chat, value=value)
    first = None
    for piece in g:
        if first is None:
            first = time.perf_counter() - t0
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    s = g.stats
    print(f"piegpu: {s.generated} tokens in {s.decode_s:.2f} s ({s.decode_tokens_per_s:.1f} tokens/s decode; "
          f"prompt {s.prompt_tokens} tokens in {s.prefill_s:.2f} s; stop: {s.stop_reason})", file=sys.stderr)
    return 0


def _load_function(ref: str):
    if ":" not in ref:
        raise PieGpuError(f"compile: {ref!r} is not FILE.py:FUNC")
    path, name = ref.rsplit(":", 1)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or not Path(path).is_file():
        raise PieGpuError(f"compile: cannot open {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(path).resolve().parent))
    spec.loader.exec_module(mod)
    fn = getattr(mod, name, None)
    if fn is None or not callable(fn):
        raise PieGpuError(f"compile: {path} has no function {name!r}")
    return fn


def _parse_spec(text: str):
    from . import eta
    from .dtypes import dtype
    name, _, dims = text.partition("[")
    shape = [int(d) for d in dims.rstrip("]").split(",") if d.strip()] if dims else []
    return eta.spec(shape, dtype.from_name(name.strip()))


def _cmd_compile(args) -> int:
    import inspect
    from . import eta
    fn = _load_function(args.function)
    if args.input:
        specs = [_parse_spec(s) for s in args.input]
    else:
        specs = list(getattr(fn, "eta_specs", ()))
    ctx = eta.IntrinsicContext.for_logits(args.vocab, args.readout)
    n_params = len(inspect.signature(fn).parameters)
    if len(specs) != n_params:
        raise PieGpuError(f"compile: {fn.__name__} takes {n_params} inputs; give their specs with --input, e.g. "
                          "--input 'f32[49152]' --input 'u32[2]' (or set fn.eta_specs)")
    prog = eta.trace(fn, *specs, context=ctx)
    code = prog.emit(args.target)
    if isinstance(code, bytes):
        try:
            from .spirv.disasm import disassemble
            code = disassemble(code)
        except ImportError:
            code = code.hex()
    print(code)
    print(f"// program {prog.hash} ({len(prog.nodes)} nodes)", file=sys.stderr)
    return 0


def _cmd_info(args) -> int:
    from .gpu.device import describe_adapters, get_device
    from .paths import cache_dir
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
    return 0


def _cmd_bench(args) -> int:
    from .bench import main as bench_main
    return bench_main(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `piegpu`."""
    ap = argparse.ArgumentParser(prog="piegpu", description="GPU runtime for local LLM inference with device epilogues")
    ap.add_argument("--verbose", action="store_true", help="more detail on stderr")
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="stream a continuation of PROMPT to stdout")
    g.add_argument("prompt")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--sampler", default="greedy", choices=["greedy", "temperature", "top-k", "top-p", "min-p",
                                                           "top-a"])
    g.add_argument("--temperature", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--model", default=None, help="a model directory or .gguf file (default: SmolLM2-135M-Instruct)")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--top-a", type=float, default=None)
    g.set_defaults(func=_cmd_generate)
    c = sub.add_parser("compile", help="print the device code of a traced function FILE.py:FUNC")
    c.add_argument("function", metavar="FILE.py:FUNC")
    c.add_argument("--target", default="wgsl", choices=["wgsl", "spirv", "msl", "cuda", "hip", "stablehlo"])
    c.add_argument("--input", action="append", help="an input spec such as 'f32[49152]' (repeat per input)")
    c.add_argument("--vocab", type=int, default=49152, help="vocab size for intrinsics.output in epilogues")
    c.add_argument("--readout", type=int, default=1, help="readout rows for intrinsics.output")
    c.set_defaults(func=_cmd_compile)
    i = sub.add_parser("info", help="the adapter, its features and limits, and the cache dir")
    i.set_defaults(func=_cmd_info)
    b = sub.add_parser("bench", help="print the benchmark table")
    b.add_argument("--json", action="store_true", help="machine-readable output")
    b.add_argument("--tokens", type=int, default=63, help="decode tokens per measurement")
    b.add_argument("--runs", type=int, default=3, help="runs per measurement (the median is reported)")
    b.add_argument("--quick", action="store_true", help="fewer tokens and runs (a smoke test)")
    b.set_defaults(func=_cmd_bench)
    return ap


def main(argv=None) -> int:
    """Entry point of the `piegpu` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except PieGpuError as e:
        print(f"piegpu: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\npiegpu: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
