"""Pie's 19 compiler goldens replayed on piegpu: verdict, hash, readiness, every step and take, per backend."""

from __future__ import annotations

import pytest

from piegpu.ptir import check_golden

from .conftest import GOLDENS, NOT_PROVIDED

STEMS = [p.stem for p in GOLDENS]


def test_all_nineteen_goldens_are_committed():
    assert len(STEMS) == 19
    assert sum(s.startswith("neg_") for s in STEMS) == 6
    assert (GOLDENS[0].parent / "SOURCE.md").read_text().count("compiler/tests/golden") == 1


@pytest.mark.parametrize("backend", ["interp", "wgsl", "spirv", "stablehlo"])
def test_every_golden_matches_or_says_why_it_cannot_run(backend, golden_texts, request):
    if backend in ("wgsl", "spirv"):
        request.getfixturevalue("gpu")
    if backend == "stablehlo":
        pytest.importorskip("jax", reason="StableHLO programs run through jax (pip install jax)")
    failures, seen = [], {}
    for stem in STEMS:
        report = check_golden(golden_texts[stem], backend=backend, name=stem)
        seen[stem] = report
        if stem in NOT_PROVIDED:
            assert report.unsupported and not report.ok, stem
            for need in NOT_PROVIDED[stem]:
                assert need in report.unsupported, (stem, report.unsupported)
            assert "not provided by piegpu's forward pass" in report.unsupported
        elif not report.ok:
            failures.append(repr(report))
    assert not failures, "\n".join(failures)
    runnable = [s for s in STEMS if s not in NOT_PROVIDED and not s.startswith("neg_")]
    assert len(runnable) == 11
    takes = sum(c.what.startswith("take") for s in runnable for c in seen[s].checks)
    steps = sum(c.what.startswith("step") for s in runnable for c in seen[s].checks)
    assert takes >= 25 and steps >= 20  # the replay is not vacuous: every case's takes were compared


def test_the_six_rejections_carry_pies_verdict(golden_texts):
    for stem in [s for s in STEMS if s.startswith("neg_")]:
        report = check_golden(golden_texts[stem], backend="interp")
        verdict = next(c for c in report.checks if c.what.endswith("verdict"))
        assert verdict.expected.startswith("ERR ") and verdict.ok, report


def test_a_wrong_take_a_wrong_hash_and_a_wrong_verdict_are_reported(golden_texts):
    text = golden_texts["greedy_argmax"]
    bad = check_golden(text.replace("take chan=1 = I32([2])", "take chan=1 = I32([3])"), backend="interp")
    assert not bad.ok and [c.what for c in bad.mismatches] == ["take chan=1"]
    assert "expected I32([3]), got I32([2])" in repr(bad)
    bad = check_golden(text.replace("hash: 0xb6c5a1e12fcc32fb", "hash: 0xb6c5a1e12fcc32fc"), backend="interp")
    assert [c.what for c in bad.mismatches] == ["greedy_argmax hash"]
    bad = check_golden(text.replace("verdict: OK", "verdict: ERR SecondProducer { chan: 1, stage: Epilogue }"),
                       backend="interp")
    assert [c.what for c in bad.mismatches] == ["greedy_argmax verdict"]
    bad = check_golden(text.replace("step 1: committed=true", "step 1: committed=false"), backend="interp")
    assert [c.what for c in bad.mismatches] == ["step 1"]
