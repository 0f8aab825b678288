"""The renderer contract: one class per target dialect, one entry point.

    code = renderer.emit(prog, limits)   # limits: plan.Limits, or None for the target's defaults

A renderer over planned kernels (WGSL, SPIR-V, MSL, CUDA, HIP) implements only
`render(plan)`; `emit` plans the program and renders it, for every such target alike.
A tensor-level renderer (StableHLO) overrides `emit` and never sees a plan.
piegpu/targets.py names each target's renderer class.
"""

from __future__ import annotations

from .plan import Limits, Plan, plan


class Renderer:
    """Base of every target's renderer. Constructor keywords are the target's emit options."""

    target = ""
    version = ""  # in the kernel cache key and the code's first line: bump it when the output changes
    limits: Limits | None = None  # the target's planning defaults (None: Limits())

    def emit(self, prog, limits: Limits | None = None) -> str | bytes:
        """Device code of an eta program: plan it (device `limits`, else this target's) and render the plan."""
        return self.render(plan(prog, limits or self.limits))

    def render(self, p: Plan) -> str | bytes:
        """Device code of a planned program."""
        raise NotImplementedError(f"{type(self).__name__} renders eta programs (emit), not plans")
