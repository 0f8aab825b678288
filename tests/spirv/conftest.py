"""Every SPIR-V module a test in this folder renders is checked by spirv-val when the test ends."""

from __future__ import annotations

import pytest

from tests.spirv.validator import MISSING, SPIRV_VAL, validate

_warned = []


@pytest.fixture(autouse=True)
def validated_modules(monkeypatch):
    """Record the modules the SPIR-V renderer produces during a test; spirv-val each one after it."""
    from piegpu.spirv.emit import SPIRV
    modules: list = []
    real = SPIRV.render

    def recording(self, plan):
        module = real(self, plan)
        modules.append(module)
        return module

    monkeypatch.setattr(SPIRV, "render", recording)
    yield modules
    if SPIRV_VAL is None:
        if not _warned:
            _warned.append(True)
            print(f"\nSPIR-V modules not validated: {MISSING}")
        return
    for i, module in enumerate(modules):
        problem = validate(module)
        assert problem is None, f"spirv-val rejected module {i} of this test:\n{problem}"
