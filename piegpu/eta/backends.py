"""Target registry: which module emits and which runs each target."""

from __future__ import annotations

import importlib

from ..errors import CompileError, ValidationError

# target -> module with `emit(prog, **options)`
EMITTERS = {
    "wgsl": "piegpu.wgsl.emit",
    "spirv": "piegpu.spirv.emit",
    "msl": "piegpu.metal.emit",
    "cuda": "piegpu.cuda.emit",
    "hip": "piegpu.cuda.emit_hip",
    "stablehlo": "piegpu.stablehlo.emit",
}
# backend -> module with `run(prog, inputs, **options)`
RUNNERS = {
    "interp": "piegpu.eta.interp_run",
    "wgsl": "piegpu.runtime.compiled",
    "spirv": "piegpu.runtime.compiled",
    "stablehlo": "piegpu.stablehlo.run",
}


def _load(table: dict, name: str, what: str):
    if name not in table:
        raise ValidationError(f"unknown {what} {name!r}. Fix: use one of {sorted(table)}")
    try:
        return importlib.import_module(table[name])
    except ImportError as e:
        raise CompileError(f"{what} {name!r} is not available: {e}") from e


def emit(prog, target: str, **options):
    """Emit device code for `target`."""
    return _load(EMITTERS, target, "target").emit(prog, target=target, **options)


def run(prog, inputs, backend: str, **options):
    """Run `prog` on `backend`; a single output is returned bare, several as a tuple."""
    outs = _load(RUNNERS, backend, "backend").run(prog, list(inputs), backend=backend, **options)
    return outs[0] if len(outs) == 1 else tuple(outs)
