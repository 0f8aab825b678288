"""`piegpu compile`: print the device code of a traced function."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ..errors import PieGpuError


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
    from .. import eta
    from ..dtypes import dtype
    name, _, dims = text.partition("[")
    shape = [int(d) for d in dims.rstrip("]").split(",") if d.strip()] if dims else []
    return eta.spec(shape, dtype.from_name(name.strip()))


def _cmd_compile(args) -> int:
    import inspect
    from .. import eta
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
            from ..spirv.disasm import disassemble
            code = disassemble(code)
        except ImportError:
            code = code.hex()
    print(code)
    print(f"// program {prog.hash} ({len(prog.nodes)} nodes)", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    """Register `piegpu compile` on the subparsers `sub`."""
    c = sub.add_parser("compile", help="print the device code of a traced function FILE.py:FUNC")
    c.add_argument("function", metavar="FILE.py:FUNC")
    from ..targets import TARGETS
    c.add_argument("--target", default="wgsl", choices=list(TARGETS))
    c.add_argument("--input", action="append", help="an input spec such as 'f32[49152]' (repeat per input)")
    c.add_argument("--vocab", type=int, default=49152, help="vocab size for intrinsics.output in epilogues")
    c.add_argument("--readout", type=int, default=1, help="readout rows for intrinsics.output")
    c.set_defaults(func=_cmd_compile)
