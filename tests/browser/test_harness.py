"""The harness itself: Chromium's adapter is SwiftShader's WebGPU, and Tint's rejections come back as errors."""

from __future__ import annotations

ADD_ONE = """
@group(0) @binding(0) var<storage, read_write> data: array<f32>;
@compute @workgroup_size(1)
fn main() { data[0] = data[0] + 1.0; }
"""


def test_adapter_is_swiftshader(browser):
    assert browser.info["architecture"] == "swiftshader", browser.info
    assert browser.limits["maxComputeInvocationsPerWorkgroup"] >= 256


def test_valid_shader_compiles(browser):
    [r] = browser.compile([{"label": "add-one", "code": ADD_ONE, "entry_points": ["main"],
                            "bindings": [[0, "storage-rw"]]}])
    assert r["errors"] == [], r


def test_tint_rejections_are_reported(browser):
    """What naga accepts and Tint rejects (a const-expression NaN) fails with Tint's message and line."""
    nan_const = ADD_ONE.replace("+ 1.0", "+ bitcast<f32>(0x7fc00000u)")
    typo = ADD_ONE.replace("data[0] + 1.0", "data[0] + undefined_name")
    wrong_layout = {"label": "read-only", "code": ADD_ONE, "entry_points": ["main"],
                    "bindings": [[0, "storage-read"]]}
    bad = browser.compile([{"label": "nan-const", "code": nan_const, "entry_points": ["main"],
                            "bindings": [[0, "storage-rw"]]},
                           {"label": "typo", "code": typo, "entry_points": ["main"], "bindings": [[0, "storage-rw"]]},
                           wrong_layout,
                           {"label": "no-entry", "code": ADD_ONE, "entry_points": ["absent"],
                            "bindings": [[0, "storage-rw"]]}])
    assert any("nan cannot be represented" in e and "line 4" in e for e in bad[0]["errors"]), bad[0]
    assert any("undefined_name" in e for e in bad[1]["errors"]), bad[1]
    assert any("createComputePipeline(main)" in e for e in bad[2]["errors"]), bad[2]
    assert any("createComputePipeline(absent)" in e for e in bad[3]["errors"]), bad[3]


def test_run_round_trips_every_dtype(browser):
    """Inputs reach the arena and outputs come back bit for bit: f32 (with NaN and -0), i32, u32 and bool."""
    import numpy as np

    from piegpu import dtype, eta
    from tests.browser.eta_items import ProgramItem, limits_from

    def fn(f, i, u, b):
        return f * 2.0 + 1.0, i * 3, u + 7, eta.not_(b), eta.select(b, f, -f)
    specs = [eta.spec([5], dtype.f32), eta.spec([5], dtype.i32), eta.spec([5], dtype.u32), eta.spec([5], dtype.bool)]
    f = np.array([0.5, -0.0, np.nan, 1e30, -3.0], np.float32)
    i = np.array([-2, 0, 7, 2**31 - 1, -(2**31)], np.int32)
    u = np.array([0, 1, 2**32 - 1, 5, 100], np.uint32)
    b = np.array([True, False, True, False, True])
    item = ProgramItem(eta.trace(fn, *specs), [f, i, u, b], limits_from(browser.limits), "round-trip")
    [reply] = browser.run([item.item])
    got = item.outputs(reply)
    with np.errstate(over="ignore"):
        want = (f * 2 + 1, (i.astype(np.int64) * 3).astype(np.int32), u + np.uint32(7), ~b, np.where(b, f, -f))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(got[4].view(np.uint32), want[4].view(np.uint32))  # moves keep -0 and NaN's sign


def test_asyncio_run_still_works_with_the_browser_open(browser):
    """Playwright's loop lives on the browser's thread: later tests of the session may asyncio.run()."""
    import asyncio

    async def three():
        return 3
    assert asyncio.run(three()) == 3
