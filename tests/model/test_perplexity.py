"""`piegpu perplexity` (llama-perplexity's method) equals a numpy computation of the same model and context,
and model.logits reads out every position of one prefill."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import piegpu
from piegpu.cli import main
from piegpu.errors import ValidationError
from piegpu.model.reference import ReferenceModel
from piegpu.model.tokenizer import load_tokenizer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "models"
TEXT = FIXTURES / "texts" / "declaration_of_independence.txt"


def numpy_perplexity(ref: ReferenceModel, tokens: list, ctx: int, chunks: int, bos: int | None) -> float:
    """llama-perplexity written out independently: chunks of ctx, BOS first if the tokenizer adds one,
    token j + 1 scored from position j for j in [ctx // 2, ctx - 1), float64 log-softmax."""
    nll, count = 0.0, 0
    for i in range(chunks):
        ids = tokens[i * ctx: (i + 1) * ctx]
        if bos is not None:
            ids = [bos] + ids[1:]
        logits = ref.forward(ids, ref.new_cache()).astype(np.float64)
        for j in range(ctx // 2, ctx - 1):
            row = logits[j] - logits[j].max()
            nll -= row[tokens[i * ctx + j + 1]] - np.log(np.exp(row).sum())
            count += 1
    return float(np.exp(nll / count))


def run_cli(capsys, *args) -> float:
    assert main(["perplexity", str(TEXT), *args]) == 0
    out = capsys.readouterr().out
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    assert m, out
    assert re.search(r"\[1\][0-9.]+,", out)  # llama.cpp's running value per chunk
    return float(m.group(1))


@pytest.mark.parametrize("family", ["llama3", "qwen3"])
def test_cli_equals_numpy_on_fixture_models(capsys, family):
    model_dir = FIXTURES / family
    got = run_cli(capsys, "--model", str(model_dir), "--ctx", "64", "--chunks", "4")
    tok = load_tokenizer(model_dir)
    want = numpy_perplexity(ReferenceModel.from_dir(model_dir), tok.encode(TEXT.read_text()).ids, 64, 4, None)
    assert abs(got - want) / want < 1e-3, (got, want)


def test_cli_equals_numpy_on_the_default_model(capsys, default_reference, default_tokenizer):
    got = run_cli(capsys, "--ctx", "64", "--chunks", "3")
    tokens = default_tokenizer.encode(TEXT.read_text()).ids
    bos = default_reference.config.bos_token_id
    adds_bos = default_tokenizer.encode("x").ids[:1] == [bos]
    want = numpy_perplexity(default_reference, tokens, 64, 3, bos if adds_bos else None)
    assert abs(got - want) / want < 1e-3, (got, want)
    print(f"default model, ctx 64, 3 chunks: piegpu PPL {got:.4f}, numpy {want:.4f}")
    assert 2 < want < 200  # a real language model on English text, not noise (vocab 49152)


def test_text_too_short_for_the_context_is_a_clear_error(capsys, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("He has refused his Assent to Laws.")
    assert main(["perplexity", str(short), "--model", str(FIXTURES / "qwen2"), "--ctx", "64"]) == 2
    err = capsys.readouterr().err
    assert "needs at least 128" in err and "--ctx" in err


def test_unreadable_file_and_bad_ctx(capsys, tmp_path):
    assert main(["perplexity", str(tmp_path / "missing.txt"), "--model", str(FIXTURES / "qwen2")]) == 2
    assert "cannot read the text file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["perplexity", str(TEXT), "--ctx", "2"])


def test_logits_are_every_position_of_one_prefill():
    model = piegpu.load_model(FIXTURES / "mistral", verbose=False, kv_dtype="f32")  # the reference's exact cache
    with model:
        ids = list(range(3, 300))  # longer than the sliding window and than one prefill pass (256 tokens)
        got = model.logits(ids)
        ref = ReferenceModel.from_dir(FIXTURES / "mistral")
        want = ref.forward(ids, ref.new_cache())
        assert got.shape == (len(ids), 320) and np.abs(got - want).max() < 1e-3
        assert np.array_equal(model.logits(ids[:5]), got[:5])  # from an empty state each call
        for bad in ([], [320], [-1], [[1, 2]], ["a"]):
            with pytest.raises(ValidationError, match="logits"):
                model.logits(bad)
    with pytest.raises(ValidationError):
        model.logits([1, 2])
