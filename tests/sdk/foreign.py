"""Containers made by the other SDKs, for the Python tests: node runs sdk/js, cargo runs sdk/rust; and the
checks every foreign container passes (runs like the Python trace; mutations are rejected).

A missing node or cargo fails the test (pytest.fail), it does not skip: the SDKs are part of the project.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from piegpu import eta
from piegpu.eta.interp import evaluate
from tests.progen import random_input
from tests.reliability.test_program_bytes_fuzz import decode_or_reject
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


def _runs(path: str) -> bool:
    return os.access(path, os.X_OK) and subprocess.run([path, "--version"], capture_output=True).returncode == 0


def _cargo() -> tuple[str, dict | None]:
    """A cargo that runs, and the environment to run it in: the cargo on PATH; where that does not run (rustup's proxy
    with no default toolchain for this user, e.g. a fresh home directory), Debian's /usr/bin/cargo with Debian's
    rustc and rustdoc (cargo runs the rustc on PATH, which would be the proxy too)."""
    cargo = _tool("cargo", "install Rust (cargo); the crate needs no registry (cargo run --offline)")
    if _runs(cargo):
        return cargo, None
    if _runs("/usr/bin/cargo") and _runs("/usr/bin/rustc"):
        return "/usr/bin/cargo", {**os.environ, "RUSTC": "/usr/bin/rustc", "RUSTDOC": "/usr/bin/rustdoc"}
    pytest.fail(f"{cargo} does not run (`cargo --version` fails: rustup with no default toolchain?). "
                "Fix: `rustup default stable`, or install Debian's cargo (scripts/setup.sh does)")


def rust_example(name: str) -> bytes:
    """stdout of `cargo run --offline --example NAME` in sdk/rust (bytes)."""
    cargo, env = _cargo()
    out = subprocess.run([cargo, "run", "--offline", "--quiet", "--example", name], cwd=RUST, capture_output=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout


class Env:
    """The runtime's side of an epilogue for the interpreter: seeded channel cells and logits; puts are recorded."""

    def __init__(self, prog: eta.Program, seed: int):
        r = np.random.default_rng(seed)
        self.cells = {slot: [random_input(r, cell) for _ in range(4)] for slot, cell in enumerate(prog.channels)}
        self.r, self.puts = r, []

    def external(self, node, ins):
        if node.op == "intrinsic":
            return random_input(self.r, node.type)
        slot = node.attr["slot"]
        if node.op == "chan_take":
            return self.cells[slot][node.attr["seq"]]
        if node.op == "chan_read":
            return self.cells[slot][0]
        self.puts.append((slot, node.attr["seq"], np.array(ins[0])))
        return None


def _run(prog: eta.Program, seed: int):
    r = np.random.default_rng(seed)
    inputs = [random_input(r, t) for t in prog.input_types]
    env = Env(prog, seed)
    return evaluate(prog, inputs, env), env.puts


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tobytes() == b.tobytes() or (a.dtype.kind == "f" and np.array_equal(a, b, equal_nan=True))


def assert_runs_like_python(data: bytes, py: eta.Program, seeds: tuple) -> None:
    """A foreign container equals the Python trace byte for byte and runs like it (outputs and puts)."""
    other = eta.Program.from_bytes(data)
    assert other.to_bytes() == py.to_bytes() and other.hash == py.hash
    assert other.channel_names == py.channel_names and other.channels == py.channels
    for seed in seeds:
        (out_o, puts_o), (out_py, puts_py) = _run(other, seed), _run(py, seed)
        assert len(out_o) == len(out_py) == len(py.outputs)
        assert all(_same(a, b) for a, b in zip(out_o, out_py))
        assert [(s, q) for s, q, _ in puts_o] == [(s, q) for s, q, _ in puts_py]
        assert all(_same(a, b) for (_, _, a), (_, _, b) in zip(puts_o, puts_py))


def assert_mutations_rejected(made: dict, seed: int) -> None:
    """The Python decoder's mutation checks on foreign containers: truncations, bit flips, magic, trailing bytes,
    version (decode_or_reject: None when rejected, else canonical bytes of another valid program)."""
    r = np.random.default_rng(seed)
    for name, data in made.items():
        cuts = range(len(data)) if len(data) <= 1024 else r.integers(0, len(data), 100)
        for n in cuts:
            assert decode_or_reject(data[:int(n)]) is None, f"{name}: a {n}-byte prefix decoded"
        for _ in range(60):
            b = bytearray(data)
            b[int(r.integers(0, len(b)))] ^= 1 << int(r.integers(0, 8))
            decode_or_reject(bytes(b))  # rejected, or canonical bytes of another valid program
        assert decode_or_reject(b"PIEETB" + data[6:]) is None
        assert decode_or_reject(data + b"\0") is None
        assert decode_or_reject(data[:6] + b"\x01\x00" + data[8:]) is None
