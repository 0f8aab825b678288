"""The PTIR -> eta rule table: every op of Pie's table has a rule and a type rule; composites give Pie's values."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.ptir import PtirRejected, decode, encode, load
from piegpu.ptir.infer import TYPE_RULES
from piegpu.ptir.runner import detach
from piegpu.ptir.translate import RULES
from piegpu.ptir.wire import OPS, Channel, Container, Op

from .conftest import CONTAINERS


def test_every_pie_op_has_one_rule_and_one_type_rule():
    names = {row.name for row in OPS.values()}
    assert set(RULES) == names
    assert set(TYPE_RULES) == names


def _run(ops: list, channels: list, inputs: dict | None = None):
    """Build a one-stage container, load it, and run it once on the interpreter; the put cells."""
    data = encode(Container(channels=[Channel(*c) for c in channels], stages=[("epilogue", ops)]))
    d = detach(load(data))
    args = [np.asarray(inputs[s[1]]).reshape(s[2]) for s in d.sources]
    out = d.program.run(*args, backend="interp")
    return [out] if isinstance(out, np.ndarray) else list(out)


def _logits(v: int) -> Op:
    return Op("intrinsic_val", (), {"intrinsic": "logits", "dtype": "f32", "shape": (1, v)})


def test_pivot_rank_le_keeps_the_k_largest_with_ties_and_skips_nan():
    x = np.array([3.0, 1.0, 3.0, np.nan, 2.0, 0.5], np.float32)
    for k, want in [(0, []), (1, [0, 2]), (2, [0, 2]), (3, [0, 2, 4]), (9, [0, 1, 2, 4, 5])]:
        ops = [_logits(6), Op("const", (), {"literal": ("i32", k)}),
               Op("pivot_threshold", (0, 1), {"predicate": "rank_le"}), Op("chan_put", (2,), {"chan": 0})]
        (keep,) = _run(ops, [("bool", (1, 6), 1, "reader")], {"logits": x})
        assert np.flatnonzero(keep.reshape(-1)).tolist() == want, k


def test_pivot_cummass_keeps_the_tokens_whose_preceding_mass_is_below_p():
    p = np.array([0.1, 0.4, 0.2, 0.3], np.float32)  # descending order: 1, 3, 2, 0
    for top_p, want in [(0.0, []), (0.3, [1]), (0.5, [1, 3]), (0.75, [1, 2, 3]), (1.0, [0, 1, 2, 3])]:
        ops = [_logits(4), Op("const", (), {"literal": ("f32", int(np.float32(top_p).view(np.uint32)))}),
               Op("pivot_threshold", (0, 1), {"predicate": "cummass_le"}), Op("chan_put", (2,), {"chan": 0})]
        (keep,) = _run(ops, [("bool", (1, 4), 1, "reader")], {"logits": p})
        assert np.flatnonzero(keep.reshape(-1)).tolist() == want, top_p


def test_broadcast_aligns_on_the_left_and_integer_division_by_zero_is_zero():
    ops = [Op("iota", (), {"imm": (2,)}), Op("broadcast", (0,), {"shape": (2, 3)}), Op("chan_put", (1,), {"chan": 0}),
           Op("const", (), {"literal": ("u32", 0)}), Op("div", (0, 2), {}), Op("chan_put", (3,), {"chan": 1})]
    rows, quotient = _run(ops, [("u32", (2, 3), 1, "reader"), ("u32", (2,), 1, "reader")])
    assert rows.tolist() == [[0, 0, 0], [1, 1, 1]]  # Pie: row i gets element i (eta would align right)
    assert quotient.tolist() == [0, 0]


def test_an_ill_typed_container_is_rejected_with_pies_body_verdict():
    ops = [_logits(4), Op("const", (), {"literal": ("i32", 1)}), Op("add", (0, 1), {})]
    data = encode(Container(stages=[("epilogue", ops)]))
    with pytest.raises(PtirRejected, match=r"Body \{ stage: Epilogue, err: BodyError \{ op_index: 2, kind: "
                                           r"DTypeMismatch \} \}.*epilogue op 2 \(add\).*Fix:"):
        load(data)


def test_inputs_piegpu_does_not_provide_are_named():
    with pytest.raises(PtirRejected, match=r"IntrinsicUnavailable \{ intr: MtpLogits \}: pass input 'mtp_logits' is "
                                           r"not provided by piegpu's forward pass"):
        load(CONTAINERS["mtp_verify_tail"])
    c = decode(CONTAINERS["greedy_argmax"])
    c.stages[0][1][0].fields["intrinsic"] = "value_head"
    c.stages[0][1][0].fields["shape"] = (8,)
    with pytest.raises(ValidationError, match="'value_head' is not provided by piegpu's forward pass"):
        load(encode(c))
