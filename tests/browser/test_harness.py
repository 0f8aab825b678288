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
