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


def test_peer_row_measures_piegpu_on_a_gguf_and_names_a_missing_llama_cpp(tmp_path, monkeypatch):
    """`piegpu bench --gguf`'s row: piegpu's child decodes the file (steady-state ms/token, load, peak RSS); where
    llama-cpp-python is missing the llama.cpp entry says so and how to get it, and the table prints both."""
    import importlib.util
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
    from modeltest_helpers import gguf_tiny_config, random_weights, write_tiny_gguf
    from piegpu.bench import peer
    cfg = gguf_tiny_config()
    w = random_weights(cfg, seed=2)
    w["model.embed_tokens.weight"][cfg.eos_token_id] = 0  # (tied) EOS's logit 0: greedy never ends before 4 tokens
    path = write_tiny_gguf(tmp_path / "tiny.gguf", cfg, w, "Q8_0")
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real_find(name, *a))
    row = peer.compare(path, ctx=64, tokens=4, runs=1)
    p = row["piegpu"]
    assert "error" not in p, p
    assert p["generated"] == 4 and p["stop_reason"] == "max_tokens" and p["kv"] == "context=64"
    assert p["load_s"] > 0 and p["peak_rss_mb"] > 0 and len(p["ms_runs"]) == 1
    # (the tiny byte-level vocabulary may join tokens into fewer text pieces: the steady state needs two pieces)
    assert p["ms_per_token"] is None or p["ms_per_token"] > 0
    assert "llama-cpp-python is not installed" in row["llama.cpp"]["error"]
    text = peer.table([row])
    assert "tiny.gguf" in text and "llama.cpp: llama-cpp-python is not installed" in text
