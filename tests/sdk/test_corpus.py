"""The shared golden corpus and the op-table export cannot go stale, and the corpus covers what issue 16 asks."""

from __future__ import annotations

import struct

from piegpu import dtype, eta
from piegpu.eta.ops import OPS, GroupOp
from piegpu.eta.program import const_value
from tests.sdk import make_corpus


def test_committed_corpus_matches_a_fresh_trace():
    assert make_corpus.CORPUS.read_text() == make_corpus.dumps(make_corpus.corpus()), (
        "tests/sdk/golden/corpus.json is stale. Fix: python -m tests.sdk.make_corpus (and check that the JS tests "
        "in sdk/js still pass: a changed container changes every SDK)")


def test_committed_op_table_export_matches_ops_py():
    assert make_corpus.OPTABLE.read_text() == make_corpus.dumps(make_corpus.optable()), (
        "sdk/js/src/optable.json is stale: piegpu/eta/ops.py changed. Fix: python -m tests.sdk.make_corpus, then give "
        "sdk/js/src/ops.js a rule for any new op (node --test sdk/js/test/*.test.js says which)")


def _programs() -> dict:
    return {e["name"]: eta.Program.from_bytes(bytes.fromhex(e["hex"])) for e in make_corpus.corpus()["programs"]}


def test_corpus_covers_every_op_group_channels_and_composites():
    progs = _programs()
    assert len(progs) >= 15
    used = {n.op for p in progs.values() for n in p.nodes}
    assert used == set(OPS), f"ops missing from the corpus: {sorted(set(OPS) - used)}"
    for group, ops in vars(GroupOp).items():
        if group.isupper():
            assert used & set(ops), group
    assert {"chan_take", "chan_read", "chan_put"} <= used
    assert "chan1" in progs["channels"].channel_names  # an unnamed channel's name
    for name in ("softmaxes", "masks", "row_params", "gumbel_max_sampler", "top_a_sampler"):
        assert name in progs


def test_corpus_has_constants_of_every_dtype_including_the_awkward_ones():
    consts = {(n.attrs[0].name, n.attrs[1]) for p in _programs().values() for n in p.nodes if n.op == "const"}
    bits = {dt: {b for d, b in consts if d == dt} for dt in ("f32", "i32", "u32", "bool")}
    f = lambda x: struct.unpack("<I", struct.pack("<f", x))[0]  # noqa: E731
    assert {f(float("-inf")), f(float("inf")), 0x7FC00000, 0x80000000, 1, f(0.1)} <= bits["f32"]  # 1: the denormal 1e-45
    assert {0, 0x80000000, 0x7FFFFFFF, 0xFFFFFFFF & -3} <= bits["i32"]
    assert {b for b in bits["u32"] if b > 1 << 31} >= {0xFFFFFFFF, 0x80000001, 2654435761, 0xDEADBEEF, 3000000000}
    assert bits["bool"] == {0, 1}
    nan = next(n for p in _programs().values() for n in p.nodes if n.op == "const" and n.attrs == (dtype.f32, 0x7FC00000))
    assert const_value(nan) != const_value(nan)  # NaN
