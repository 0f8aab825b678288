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
SHAPES = [(), (1,), (2,), (3,), (2, 3), (3, 2), (2, 1, 3)]  # (2,): the u32[2] RNG state
TYPES = [TType(d, s) for d in DTYPES for s in SHAPES]
# f16 as an attribute only: a storage dtype that cast must refuse
ATTR_VALUES = {A_INT: [-1, 0, 1, 2, 3, 7], A_DTYPE: DTYPES + [dtype.f16],
               A_SHAPE: [(), (1,), (3,), (6,), (2, 3), (0,), (5, 0)], A_STR: ["logits", ""]}
# Rules with nothing to refuse on this domain: const takes any dtype and bit pattern, chan_put
# any cell (the channel's shape is checked when the program binds it). Every other rule must
# refuse some input, or the domain above is too narrow to test it.
ACCEPTS_EVERYTHING = {"const", "chan_put"}


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


def check_rule(name: str) -> tuple:
    """(typed, refused): how many input/attribute combinations op `name`'s rule typed and refused.

    Every combination of TYPES (one to three inputs for variadic ops) and ATTR_VALUES is run.
    """
    opdef = OPS[name]
    typed = refused = 0
    attr_sets = list(_attr_sets(opdef))
    for ins in _input_sets(opdef):
        for attrs in attr_sets:
            try:
                out = infer(name, list(ins), attrs)
            except ValidationError as e:
                assert "Fix:" in str(e) or "fix" in str(e).lower(), f"{name}{ins}{attrs}: {e} names no fix"
                refused += 1
            else:
                assert out is None or isinstance(out, TType), f"{name}{ins}{attrs} gave {out!r}"
                typed += 1
    return typed, refused


@pytest.mark.parametrize("name", sorted(OPS))
def test_rule_gives_a_type_or_a_validation_error(name):
    typed, refused = check_rule(name)
    # both paths of the rule ran: some inputs typed (else the domain never reached its accept
    # path, as it did not for rng before SHAPES had (2,)) and, unless listed, some refused
    assert typed > 0, f"{name}: no input in the test domain is valid; add types/attributes the rule accepts"
    if name in ACCEPTS_EVERYTHING:
        assert refused == 0, f"{name} refuses inputs now: drop it from ACCEPTS_EVERYTHING"
    else:
        assert refused > 0, f"{name}: no input in the test domain is refused; add invalid types/attributes"


def test_exceptions_name_real_ops():
    assert ACCEPTS_EVERYTHING <= set(OPS), f"stale names in ACCEPTS_EVERYTHING: {ACCEPTS_EVERYTHING - set(OPS)}"


def test_concat_of_a_vector_and_a_scalar_is_a_validation_error():
    with pytest.raises(ValidationError, match="concat.*rank"):
        eta.trace(lambda a, b: eta.concat([a, b]), eta.spec([3], dtype.f32), eta.spec([], dtype.f32))
