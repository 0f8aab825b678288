"""Every type rule of the op table, on every combination of small input types and attributes.

A rule must either give a type or raise ValidationError -- never IndexError, KeyError or
the like -- because the tracer and the byte decoder (Program.from_bytes on corrupt bytes)
both run these rules on whatever they are handed. Found by the fuzzer's bit flips: concat
of a [3] and a rank-0 tensor raised IndexError.
"""

from __future__ import annotations

import itertools

import pytest

from piegpu import ValidationError, dtype, eta
from piegpu.eta.ops import A_DTYPE, A_INT, A_SHAPE, A_STR, OPS, TType, infer

DTYPES = [dtype.f32, dtype.i32, dtype.u32, dtype.bool]
SHAPES = [(), (1,), (3,), (2, 3), (3, 2), (2, 1, 3)]
TYPES = [TType(d, s) for d in DTYPES for s in SHAPES]
ATTR_VALUES = {A_INT: [-1, 0, 1, 2, 3, 7], A_DTYPE: DTYPES, A_SHAPE: [(), (1,), (3,), (6,), (2, 3), (0,), (5, 0)],
               A_STR: ["logits", ""]}


def _attr_sets(opdef):
    names = [n for n, _ in opdef.attrs]
    for values in itertools.product(*(ATTR_VALUES[k] for _, k in opdef.attrs)):
        yield dict(zip(names, values))


def _input_sets(opdef):
    if opdef.arity is None:  # variadic: one to three inputs
        for n in (1, 2, 3):
            yield from itertools.product(TYPES, repeat=n)
    else:
        yield from itertools.product(TYPES, repeat=opdef.arity)


@pytest.mark.parametrize("name", sorted(OPS))
def test_rule_gives_a_type_or_a_validation_error(name):
    opdef = OPS[name]
    checked = 0
    attr_sets = list(_attr_sets(opdef))
    for ins in _input_sets(opdef):
        for attrs in attr_sets[:: max(1, len(attr_sets) // 12)]:  # a spread of the attribute combinations
            try:
                out = infer(name, list(ins), attrs)
            except ValidationError as e:
                assert "Fix:" in str(e) or "fix" in str(e).lower(), f"{name}{ins}{attrs}: {e} names no fix"
            else:
                assert out is None or isinstance(out, TType)
            checked += 1
    assert checked > 0


def test_concat_of_a_vector_and_a_scalar_is_a_validation_error():
    with pytest.raises(ValidationError, match="concat.*rank"):
        eta.trace(lambda a, b: eta.concat([a, b]), eta.spec([3], dtype.f32), eta.spec([], dtype.f32))
