"""The emitted text of a few representative programs is pinned per target.

A change to an emitter that alters its output fails here. If the change is deliberate:
bump that emitter's VERSION (it is part of the kernel cache key and of the text's first
line), then regenerate with PIEGPU_REGEN_GOLDEN=1. Regeneration refuses to overwrite a
golden file with different text under the same VERSION.

Pinned: every target wgpu does not run. WGSL and SPIR-V run on lavapipe against the
interpreter instead (every op and hundreds of random programs).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from piegpu.targets import TARGETS, WGPU_TARGETS, renderer
from tests.targets import corpus

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("PIEGPU_REGEN_GOLDEN") == "1"
PINNED = [t for t in TARGETS if t not in WGPU_TARGETS]
NAMES = [n for n, _ in corpus.golden_programs()]


def _version(target: str) -> str:
    return renderer(target).version


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("target", PINNED)
def test_golden_text(target, name):
    prog = dict(corpus.golden_programs())[name]
    text = prog.emit(target)
    version = _version(target)
    assert f"({version})" in text.splitlines()[0], "the first line must name the emitter VERSION"
    path = GOLDEN / f"{name}.{target}.txt"
    old = path.read_text() if path.exists() else None
    if REGEN:
        if old is not None and old != text and f"({version})" in old.splitlines()[0]:
            pytest.fail(f"{path.name}: the {target} output changed but VERSION is still {version}. "
                        "Fix: bump VERSION in the emitter module, then regenerate")
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert old is not None, f"{path} is missing. Fix: generate it with PIEGPU_REGEN_GOLDEN=1"
    if text != old:
        diff = "".join(difflib.unified_diff(old.splitlines(True), text.splitlines(True), "golden", "emitted", n=2))
        pytest.fail(f"{target} output for {name!r} differs from {path.name}. If deliberate: bump VERSION in the "
                    f"emitter and regenerate with PIEGPU_REGEN_GOLDEN=1.\n{diff[:6000]}")
