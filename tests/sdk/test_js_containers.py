"""Containers made by the JS tracer (sdk/js) decode in Python and run on the interpreter like the Python-traced ones.

node runs sdk/js/scripts/dump-corpus.js, which traces tests/sdk/programs.py's programs as written in
sdk/js/test/programs.js. A missing node is a failure, not a skip: the SDK is part of the project.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from piegpu import eta
from piegpu.eta.interp import evaluate
from tests.progen import random_input
from tests.sdk.make_corpus import ROOT
from tests.sdk.programs import PROGRAMS
from tests.reliability.test_program_bytes_fuzz import decode_or_reject


@pytest.fixture(scope="module")
def js_made() -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed, so the JS SDK (sdk/js) cannot be tested. Fix: install Node.js 20+")
    out = subprocess.run([node, "sdk/js/scripts/dump-corpus.js"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {name: bytes.fromhex(h) for name, h in json.loads(out.stdout).items()}


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


def test_node_traces_every_corpus_program(js_made):
    assert sorted(js_made) == sorted(PROGRAMS)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_js_container_decodes_and_runs_like_the_python_trace(js_made, name):
    py = PROGRAMS[name]()
    js = eta.Program.from_bytes(js_made[name])
    assert js.to_bytes() == py.to_bytes() and js.hash == py.hash
    assert js.channel_names == py.channel_names and js.channels == py.channels
    for seed in range(2):
        (out_js, puts_js), (out_py, puts_py) = _run(js, seed), _run(py, seed)
        assert len(out_js) == len(out_py) == len(py.outputs)
        assert all(_same(a, b) for a, b in zip(out_js, out_py))
        assert [(s, q) for s, q, _ in puts_js] == [(s, q) for s, q, _ in puts_py]
        assert all(_same(a, b) for (_, _, a), (_, _, b) in zip(puts_js, puts_py))


_decode_or_reject = decode_or_reject  # the fuzz suite's: None when rejected, else canonical


def test_mutations_of_js_made_containers_are_rejected(js_made):
    r = np.random.default_rng(16)
    for name, data in js_made.items():
        cuts = range(len(data)) if len(data) <= 1024 else r.integers(0, len(data), 100)
        for n in cuts:
            assert _decode_or_reject(data[:int(n)]) is None, f"{name}: a {n}-byte prefix decoded"
        for _ in range(60):
            b = bytearray(data)
            b[int(r.integers(0, len(b)))] ^= 1 << int(r.integers(0, 8))
            _decode_or_reject(bytes(b))
        assert _decode_or_reject(b"PIEETB" + data[6:]) is None
        assert _decode_or_reject(data + b"\0") is None
        assert _decode_or_reject(data[:6] + b"\x01\x00" + data[8:]) is None
