"""`piegpu compile`: print the device code of an epilogue traced in Python, JavaScript or Rust.

    piegpu compile examples/top_a.py:top_a --target wgsl       Python: traced here
    piegpu compile sdk/js/examples/top_a.js:topA --target msl  JavaScript: node runs the JS tracer (sdk/js)
    piegpu compile top_a.eta --target spirv                    any tracer's container bytes, e.g. Rust's
                                                               (cargo run --offline --example top_a > top_a.eta)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import PieGpuError

JS_SUFFIXES = (".js", ".mjs")
HEX_MARK = "PIEGPU-ETA-HEX:"

# Runs in node: import the module, take export NAME (a Program, or a function returning one), print its bytes.
# The file and the name travel in the environment so that process.argv stays [node] (an example that writes
# its bytes when run as a script must not think it is the script).
_NODE_EXPORT = f"""
import {{ pathToFileURL }} from "node:url";
const file = process.env.PIEGPU_JS_FILE, name = process.env.PIEGPU_JS_EXPORT;
const mod = await import(pathToFileURL(file).href);
if (!(name in mod)) {{
  console.error(`${{file}} exports no ${{JSON.stringify(name)}} (it exports ${{Object.keys(mod).join(", ") || "nothing"}})`);
  process.exit(3);
}}
let prog = mod[name];
if (typeof prog === "function") prog = prog();
if (!prog || typeof prog.toBytes !== "function") {{
  console.error(`${{name}} is not an eta Program (trace(...)) nor a function returning one`);
  process.exit(3);
}}
process.stdout.write("\\n{HEX_MARK}" + Buffer.from(prog.toBytes()).toString("hex") + "\\n");
"""


def _split(ref: str) -> tuple:
    """(path, name or None) of FILE.py:FUNC, FILE.js:NAME or FILE.eta."""
    if ":" in ref and not Path(ref).is_file():
        path, name = ref.rsplit(":", 1)
        return path, name
    return ref, None


def _load_function(path: str, name: str):
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


def _trace_python(path: str, name: str, args):
    import inspect
    from .. import eta
    fn = _load_function(path, name)
    specs = [_parse_spec(s) for s in args.input] if args.input else list(getattr(fn, "eta_specs", ()))
    ctx = eta.IntrinsicContext.for_pass(args.vocab, args.hidden, args.readout)
    n_params = len(inspect.signature(fn).parameters)
    if len(specs) != n_params:
        raise PieGpuError(f"compile: {fn.__name__} takes {n_params} inputs; give their specs with --input, e.g. "
                          "--input 'f32[49152]' --input 'u32[2]' (or set fn.eta_specs)")
    return eta.trace(fn, *specs, context=ctx)


def js_container(path: str, name: str) -> bytes:
    """The container bytes of export `name` of the JS module `path`, traced by node with sdk/js."""
    node = shutil.which("node")
    if node is None:
        raise PieGpuError("compile: a .js epilogue needs node (Node.js 20+) to run the JS tracer. Fix: install "
                          "Node.js, or compile the container it writes (node FILE.js > x.eta; piegpu compile x.eta)")
    if not Path(path).is_file():
        raise PieGpuError(f"compile: cannot open {path}")
    env = dict(os.environ, PIEGPU_JS_FILE=str(Path(path).resolve()), PIEGPU_JS_EXPORT=name)
    out = subprocess.run([node, "--input-type=module", "-e", _NODE_EXPORT], env=env, capture_output=True, text=True,
                         timeout=300)
    marked = [line for line in out.stdout.splitlines() if line.startswith(HEX_MARK)]
    if out.returncode != 0 or not marked:
        raise PieGpuError(f"compile: node could not trace {path}:{name}: {out.stderr.strip() or out.stdout.strip()}")
    return bytes.fromhex(marked[-1][len(HEX_MARK):])


def load_program(ref: str, args):
    """The eta Program that FILE.py:FUNC, FILE.js:NAME, FILE.eta or FILE.ptir names (ValidationError for bad bytes)."""
    from ..eta.program import Program
    from ..runtime.forward import as_program
    path, name = _split(ref)
    suffix = Path(path).suffix
    if name is None:
        if suffix == ".py" or suffix in JS_SUFFIXES:
            raise PieGpuError(f"compile: say which function of {path} to compile: {path}:NAME")
        if args.input:
            raise PieGpuError("compile: --input is for Python functions; a container carries its input types")
        try:
            return as_program(Path(path).read_bytes(), f"compile {path}")
        except OSError as e:
            raise PieGpuError(f"compile: cannot read {path}: {e.strerror}") from None
    if suffix in JS_SUFFIXES:
        if args.input:
            raise PieGpuError("compile: --input is for Python functions; the JS module traces with its own specs")
        return Program.from_bytes(js_container(path, name))
    return _trace_python(path, name, args)


def _cmd_compile(args) -> int:
    prog = load_program(args.function, args)
    if args.save_container:
        Path(args.save_container).write_bytes(prog.to_bytes())
    if args.target == "stablehlo" and getattr(prog, "ptir_container", None) is not None and not prog.is_pure:
        from ..ptir.runner import detach  # a Pie pass as one function: cells and logits in, puts out
        prog = detach(prog).program
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
    c = sub.add_parser("compile", help="print the device code of an epilogue: FILE.py:FUNC, FILE.js:NAME or FILE.eta")
    c.add_argument("function", metavar="FILE.py:FUNC | FILE.js:NAME | FILE.eta")
    from ..targets import TARGETS
    c.add_argument("--target", default="wgsl", choices=list(TARGETS))
    c.add_argument("--input", action="append", help="an input spec such as 'f32[49152]' (repeat per input; Python only)")
    c.add_argument("--vocab", type=int, default=49152, help="vocab size for intrinsics.output in Python epilogues")
    c.add_argument("--readout", type=int, default=1, help="readout rows for intrinsics.output (Python)")
    c.add_argument("--hidden", type=int, default=576,
                   help="hidden size for intrinsics.output(i, 'hidden') in Python epilogues (default: the default model's)")
    c.add_argument("--save-container", metavar="OUT.eta", default=None,
                   help="also write the program's container bytes (any language's, e.g. a JS export) to OUT.eta")
    c.set_defaults(func=_cmd_compile)
