"""`piegpu bench`'s batched-decode ratios: run-by-run pairs, not ratios of medians."""

import pytest

from piegpu.bench.batch import pass_table, rows


def test_ratios_are_medians_of_run_pairs():
    # run 2 was a slow spell for both sizes: its pair still says 2x, while the medians alone would give 90/40
    t = pass_table({1: [30.0, 60.0, 40.0], 8: [60.0, 120.0, 90.0]})
    assert t[8]["per_sequence_ms_vs_b1_runs"] == [2.0, 2.0, 2.25]
    assert t[8]["per_sequence_ms_vs_b1"] == 2.0
    assert t[8]["aggregate_vs_b1"] == 4.0
    assert t[8]["ms_per_pass"] == 90.0 and t[8]["tokens_per_s"] == pytest.approx(8e3 / 90)
    assert t[1]["per_sequence_ms_vs_b1"] == 1.0 and t[1]["aggregate_vs_b1"] == 1.0


def test_table_line_shows_the_spread_of_the_pairs():
    r = {"prefill_vs_numpy": {}, "batched_decode": pass_table({1: [30.0, 33.0], 8: [63.0, 59.4]}),
         "ttft": {"prompt_tokens": 37, "prefill_s": 0.25, "first_token_s": 0.3}}
    line = [x for x in rows(r) if x.startswith("batched greedy decode B=8")][0]
    assert "per-sequence ms/token 1.95x B=1, runs 1.80-2.10x" in line, line
