"""Every bad input of cases.py raises its error, naming where and how to fix it; docs/errors.md is current."""

from __future__ import annotations

import difflib

import pytest

from tests.reliability.cases import DOC, FIX_WORDS, Ctx, all_cases, outcome, table

CASES = all_cases()
_outcomes: dict = {}  # case index -> (class name, message)


@pytest.fixture(scope="module")
def ctx():
    c = Ctx()
    yield c
    c.close()


def _outcome(i: int, ctx: Ctx, request) -> tuple:
    if i not in _outcomes:
        if CASES[i].needs_gpu:
            request.getfixturevalue("gpu")
        cls, msg, exc = outcome(CASES[i], ctx)
        _outcomes[i] = (cls, msg, exc)
    return _outcomes[i]


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c.area}: {c.what}"[:80] for c in CASES])
def test_bad_input_raises_a_clear_error(i, ctx, request):
    case = CASES[i]
    cls, msg, exc = _outcome(i, ctx, request)
    if case.warns:
        assert cls == "(warning)", f"expected a warning, got {cls}: {msg}"
    else:
        assert isinstance(exc, case.error), f"expected {case.error.__name__}, got {cls}: {msg}"
    missing = [w for w in case.where if w not in msg]
    assert not missing, f"the message does not say where ({missing}): {msg}"
    if case.gap:
        assert not FIX_WORDS.search(msg), (f"{case.gap} now says how to fix this; remove gap= from the case: {msg}")
    else:
        assert FIX_WORDS.search(msg), f"the message does not say how to fix it: {msg}"


def test_docs_errors_md_is_up_to_date(ctx, request):
    rows = []
    for i, case in enumerate(CASES):
        cls, msg, _ = _outcome(i, ctx, request)
        rows.append((case, cls, msg))
    want = table(rows)
    have = DOC.read_text() if DOC.exists() else ""
    if have != want:
        diff = "".join(difflib.unified_diff(have.splitlines(True), want.splitlines(True), "committed", "generated",
                                            n=1))
        pytest.fail(f"{DOC} is out of date; run `python -m tests.reliability.cases --write`:\n{diff[:4000]}")
