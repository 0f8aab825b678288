"""Every SPIR-V module a test in this folder renders is checked by spirv-val when the test ends."""

from __future__ import annotations

import pytest

from tests.spirv.validator import MISSING, SPIRV_VAL, validate

_warned = []


@pytest.fixture(autouse=True)
def validated_modules(monkeypatch):
    """Record the modules piegpu.spirv.emit.render produces during a test; spirv-val each one after it."""
    import piegpu.spirv.emit as spirv_emit
    modules: list = []
    real = spirv_emit.render

    def recording(plan):
        module = real(plan)
        modules.append(module)
        return module

    monkeypatch.setattr(spirv_emit, "render", recording)
    yield modules
    if SPIRV_VAL is None:
        if not _warned:
            _warned.append(True)
            print(f"\nSPIR-V modules not validated: {MISSING}")
        return
    for i, module in enumerate(modules):
        problem = validate(module)
        assert problem is None, f"spirv-val rejected module {i} of this test:\n{problem}"
