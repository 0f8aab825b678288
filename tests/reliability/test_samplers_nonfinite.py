"""NaN and inf logits into every sampler of piegpu.samplers, run as eta programs on each backend.

The interpreter's tokens are the documented results (docs/errors.md, from samplers_table.py);
every backend must return the same token, and no token may be outside [0, vocab).
"""

from __future__ import annotations

import pytest

from tests.reliability.samplers_table import LOGITS, V, make, program, sampler_names

NAMES = sampler_names()


@pytest.fixture(scope="module")
def programs_by_name():
    return {name: program(make(name)) for name in NAMES}


@pytest.mark.parametrize("backend", ["wgsl", "spirv", "stablehlo"])
def test_every_sampler_on_non_finite_logits(gpu, programs_by_name, backend):
    if backend == "stablehlo":
        from piegpu.stablehlo.run import _client
        _client()
    bad = []
    for name, (prog, extra) in programs_by_name.items():
        for case, x in LOGITS.items():
            ref = int(prog.run(x, *extra))
            got = int(prog.run(x, *extra, backend=backend))
            if not 0 <= got < V:
                bad.append(f"{name} / {case}: token {got} outside [0, {V})")
            elif got != ref:
                bad.append(f"{name} / {case}: {backend} gives {got}, the interpreter {ref}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", NAMES)
def test_nothing_finite_gives_token_zero(programs_by_name, name):
    prog, extra = programs_by_name[name]
    for case in ("all NaN", "all -inf", "-inf and NaN only"):
        assert int(prog.run(LOGITS[case], *extra)) == 0, case


def test_a_dominant_logit_wins_in_every_sampler(programs_by_name):
    """A +inf logit (or one that overflows to +inf once divided by the temperature) is the token."""
    wrong = []
    for name, (prog, extra) in programs_by_name.items():
        for case, want in (("+inf at id 7", 7), ("+inf at id 7, NaN at 10..19", 7), ("3e38 at id 3 (overflows / T)", 3)):
            got = int(prog.run(LOGITS[case], *extra))
            if got != want:
                wrong.append(f"{name} / {case}: {got}")
    assert not wrong, wrong
