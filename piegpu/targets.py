"""The target table: every device target once -- its renderer, whether wgpu runs it, what runs its programs.

    prog.emit("cuda")             ->  renderer("cuda").emit(prog, limits)   (kernel/render.py)
    prog.run(x, backend="spirv")  ->  RUNNERS["spirv"] module's run(prog, [x], backend="spirv")

Program.emit/run, the runtime (compile_program, Pipeline's epilogue target), the
command line (`piegpu compile --target`) and the tests all read TARGETS. This is a
leaf module: renderers and runners are named by import path and loaded on first use,
so importing it loads no emitter. A new target is one row here plus one Renderer class.

Where op X is lowered for target Y. A kernel target first turns every op that is not
elementwise into KIR (kernel file, same for every kernel target), then renders the
KIR's elementwise ops with its rules (rule file): at most these two files per op.

    target      rule file (GroupOp.ELEMENTWISE, casts)     syntax: signature, barriers, atomics
    wgsl        wgsl/emit.py      WGSL.ops, WGSL.casts      wgsl/emit.py
    spirv       spirv/rules.py    RULES, CASTS              spirv/emit.py (helpers: spirv/prelude.py)
    msl         kernel/cxx.py     cxx_ops, CASTS            metal/emit.py
    cuda        kernel/cxx.py     cxx_ops, CASTS            cuda/emit.py
    hip         kernel/cxx.py     cxx_ops, CASTS            cuda/emit_hip.py (CUDA's, HIP header)
    stablehlo   stablehlo/emit.py RULES: every op, tensor-level, no kernels

    op (GroupOp in eta/ops.py)                       kernel file (wgsl, spirv, msl, cuda, hip)
    ELEMENTWISE                                      none: inlined into each kernel that reads it
    SHAPE, INDEX, SOURCE (incl. RUNTIME), rng        kernel/inline.py
    REDUCE, SCAN                                     kernel/reductions.py
    ORDER (top_k, sort_desc)                         kernel/sorting.py
    LINEAR, SCATTER; the channel commit              kernel/templates.py (also TEMPLATES: op -> template)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .errors import CompileError, ValidationError


@dataclass(frozen=True)
class Target:
    """One row of the target table."""

    name: str
    renderer: str  # "module:Class" of its Renderer (piegpu/kernel/render.py)
    wgpu: bool = False  # wgpu (naga) takes the code: ForwardPass epilogues and compile_program can use it
    runner: str | None = None  # module whose run(prog, inputs, backend=...) serves Program.run

    @property
    def module(self) -> str:
        """The import path of the module that declares the renderer."""
        return self.renderer.partition(":")[0]


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("wgsl", "piegpu.wgsl.emit:WGSL", wgpu=True, runner="piegpu.runtime.compiled"),
    Target("spirv", "piegpu.spirv.emit:SPIRV", wgpu=True, runner="piegpu.runtime.compiled"),
    Target("msl", "piegpu.metal.emit:MSL"),
    Target("cuda", "piegpu.cuda.emit:CUDA"),
    Target("hip", "piegpu.cuda.emit_hip:HIP"),
    Target("stablehlo", "piegpu.stablehlo.emit:StableHLO", runner="piegpu.stablehlo.run"),
)}
WGPU_TARGETS = tuple(n for n, t in TARGETS.items() if t.wgpu)
# Program.run backends: the reference interpreter, then every target with a runner.
RUNNERS: dict[str, str] = {"interp": "piegpu.eta.interp_run",
                           **{n: t.runner for n, t in TARGETS.items() if t.runner}}


def lookup(name: str) -> Target:
    """The row of target `name` (ValidationError naming the targets there are)."""
    hit = TARGETS.get(name)
    if hit is None:
        raise ValidationError(f"unknown target {name!r}. Fix: use one of {sorted(TARGETS)}")
    return hit


def _load(path: str, what: str):
    try:
        return importlib.import_module(path)
    except ImportError as e:
        raise CompileError(f"{what} is not available: {e}") from e


def renderer(name: str, **options):
    """A Renderer of target `name`; `options` are its constructor's (`prefix` for msl, cuda, hip)."""
    t = lookup(name)
    cls = getattr(_load(t.module, f"target {name!r}"), t.renderer.partition(":")[2])
    try:
        return cls(**options)
    except TypeError as e:
        raise ValidationError(f"target {name!r} does not take the emit options {sorted(options)}: {e}. "
                              "Fix: pass only limits= (and prefix= for msl, cuda, hip)") from None


def emit(prog, target: str, limits=None, **options):
    """Device code of `prog` for `target`: bytes for spirv, str for every other target."""
    return renderer(target, **options).emit(prog, limits)


def run(prog, inputs, backend: str, **options):
    """Run `prog` on `backend` (RUNNERS); a single output is returned bare, several as a tuple."""
    if backend not in RUNNERS:
        raise ValidationError(f"unknown backend {backend!r}. Fix: use one of {sorted(RUNNERS)}")
    runner = _load(RUNNERS[backend], f"backend {backend!r}")
    outs = runner.run(prog, list(inputs), backend=backend, **options)
    return outs[0] if len(outs) == 1 else tuple(outs)
