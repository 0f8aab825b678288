"""The epilogues the runtime really compiles -- every sampler of model.generate, the batch scheduler's,
examples/top_a.py's decode loop -- compile in Chromium's WebGPU with their channel and logits bindings.

These programs read intrinsics (the logits) and take/put channel cells, so their WGSL has the
code a pure program lacks: channel ring addressing, the all-or-nothing commit of a pass's puts
with its atomics. Each is bound as the runtime binds it (runtime/compiled.py): one read_write
storage buffer per plan binding.
"""

from __future__ import annotations

import pytest

from piegpu.kernel.plan import plan
from tests.browser.eta_items import limits_from, numbered
from tests.browser.model_capture import SAMPLERS


@pytest.fixture(scope="module")
def compiled_epilogues(browser, model_capture):
    """[(label, plan, code, reply)] for every captured epilogue, compiled in one batch."""
    limits = limits_from(browser.limits)
    rows = []
    for label, prog in model_capture.epilogues:
        p = plan(prog, limits)
        rows.append((label, p, prog.emit("wgsl", limits=limits)))
    replies = browser.compile([{"label": label, "code": code, "entry_points": [k.name for k in p.kernels],
                                "bindings": [[i, "storage-rw"] for i in range(len(p.bindings))]}
                               for label, p, code in rows])
    return [(*row, reply) for row, reply in zip(rows, replies)]


def test_the_capture_saw_every_path(model_capture):
    labels = {label.rsplit("-", 1)[0] for label, _ in model_capture.epilogues}
    assert set(SAMPLERS) | {"batch", "examples/top_a.py"} <= labels, labels


def test_epilogues_compile_in_chromium(compiled_epilogues):
    kinds = set()
    failures = []
    for label, p, code, reply in compiled_epilogues:
        kinds |= {b.kind for b in p.bindings}
        if reply["errors"]:
            failures.append(f"{label}:\n  " + "\n  ".join(reply["errors"]) + f"\n--- WGSL ---\n{numbered(code)}")
    assert not failures, "\n".join(failures)
    assert {"arena", "intrinsic", "channel"} <= kinds, kinds
