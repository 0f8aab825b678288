"""Containers made by the other SDKs, for the Python tests: node runs sdk/js, cargo runs sdk/rust.

A missing node or cargo fails the test (pytest.fail), it does not skip: the SDKs are part of the project.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.sdk.make_corpus import ROOT

RUST = ROOT / "sdk" / "rust"


def _tool(name: str, fix: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed, so the SDK it runs cannot be tested. Fix: {fix}")
    return path


def js_output(script: str, *args: str) -> bytes:
    """stdout of `node sdk/js/<script> args...` (bytes)."""
    node = _tool("node", "install Node.js 20+")
    out = subprocess.run([node, str(ROOT / "sdk" / "js" / script), *args], cwd=ROOT, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout


def rust_example(name: str) -> bytes:
    """stdout of `cargo run --offline --example NAME` in sdk/rust (bytes)."""
    cargo = _tool("cargo", "install Rust (cargo); the crate needs no registry (cargo run --offline)")
    out = subprocess.run([cargo, "run", "--offline", "--quiet", "--example", name], cwd=RUST, capture_output=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout
