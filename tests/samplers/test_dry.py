"""DRY as a device stage: equals llama.cpp's llama_sampler_dry_apply (numpy port in numpy_samplers.dry).

The device keeps the token history, the breaker flags and table, and the latest breaker position
in channels; the match lengths are computed in the epilogue. Checked: llama.cpp's test-sampling.cpp
DRY cases, many random histories with repeats, single- and multi-token breakers, ties, -inf and NaN,
over several decode steps (the history and breaker state advanced on the device), on the
interpreter and on WGSL; the tokenizer's breaker sequences; options, CLI flags and generate().
"""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError, dtype, eta
from piegpu.samplers import DRY, Sampler, SeqContext, from_spec
from piegpu.samplers.dry import breaker_sequences, max_exponent
from tests.samplers import numpy_samplers as ref

S = eta.spec


@pytest.fixture(params=["interp", "wgsl"])
def backend(request):
    if request.param == "wgsl":
        request.getfixturevalue("gpu")
    return request.param


class Stepper:
    """A traced (logits, states, token) -> (DRY logits before the token, next states) program for one stage."""

    def __init__(self, stage: DRY, vocab: int, backend: str):
        self.stage, self.backend = stage, backend
        self.specs = stage.states(vocab)
        self.names = [s.name for s in self.specs]

        def fn(x, tok, *st):
            states = dict(zip(self.names, st))
            out = stage.apply(eta.sanitize(x), states)
            nxt = stage.update(states, tok, out)
            return (out,) + tuple(nxt[n] for n in self.names)
        self.prog = eta.trace(fn, S([vocab], dtype.f32), S([], dtype.i32),
                              *[S(list(s.shape), s.dtype) for s in self.specs])

    def run(self, x, token, states: dict):
        res = self.prog.run(x, np.int32(token), *[states[n] for n in self.names], backend=self.backend)
        return res[0], dict(zip(self.names, res[1:]))


def final_probs(logits) -> np.ndarray:
    p = np.exp(logits - logits.max())
    return p / p.sum()


LLAMA_CASES = [  # test_dry(probs, last_tokens, expected, multiplier, base, allowed_length, penalty_last_n, breakers)
    ([0.25] * 4, [0, 1], [0.25] * 4, 1.0, 1.1, 2, 4, []),
    ([0.25] * 4, [0, 1, 2, 0, 1], [0.296923, 0.296923, 0.109232, 0.296923], 1.0, 1.1, 2, 5, []),
    ([0.2] * 5, [0, 1, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 2, 6, [[3]]),
    ([0.2] * 5, [0, 1, 2, 0, 1], [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], 2.0, 1.1, 2, 5, []),
    ([0.2] * 5, [0, 1, 2, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 4, 7, []),
]


@pytest.mark.parametrize("case", LLAMA_CASES, ids=[f"case{i}" for i in range(len(LLAMA_CASES))])
def test_llama_cpp_dry_cases(case, backend):
    probs, last, expected, mult, base, allowed, last_n, breakers = case
    stage = DRY(mult, base, allowed, last_n, breakers)
    x = np.log(np.asarray(probs, np.float32))
    init = stage.initial(SeqContext(tuple(last), x.size))
    out, _ = Stepper(stage, x.size, backend).run(x, 0, init)
    np.testing.assert_allclose(final_probs(out), expected, atol=1e-6)


def _history(rng, n: int, vocab: int) -> list:
    """Tokens with repeated stretches (copies of earlier spans), so repeats of many lengths occur."""
    out: list = []
    while len(out) < n:
        if out and rng.random() < 0.5:
            a = int(rng.integers(0, len(out)))
            out += out[a:a + int(rng.integers(1, 9))]
        else:
            out += [int(t) for t in rng.integers(0, vocab, int(rng.integers(1, 4)))]
    return out[:n]


def _logits(rng, vocab: int) -> np.ndarray:
    x = rng.normal(0, 2, vocab).astype(np.float32)
    x[rng.integers(0, vocab, 3)] = np.float32(1.5)  # ties
    x[rng.integers(0, vocab, 2)] = -np.inf
    x[rng.integers(0, vocab, 1)] = np.nan
    return x


def _case(rng, vocab: int):
    last_n = int(rng.choice([-1, 6, 12, 31]))
    stage_args = dict(multiplier=float(rng.choice([0.5, 1.0, 2.5])), base=float(rng.choice([1.0, 1.1, 1.75, 4.0])),
                      allowed_length=int(rng.choice([0, 1, 2, 3])), penalty_last_n=last_n, context_size=20)
    breakers = [[int(rng.integers(0, vocab))] for _ in range(int(rng.integers(0, 3)))]
    for _ in range(int(rng.integers(0, 3))):
        breakers.append([int(t) for t in rng.integers(0, vocab, int(rng.integers(2, 4)))])
    return stage_args, breakers


@pytest.mark.parametrize("seed", range(6))
def test_dry_matches_numpy_over_decode_steps(seed, backend):
    """Random histories and breakers; the device advances its states over 6 steps; each step's logits match."""
    rng = np.random.default_rng(seed)
    vocab = 12
    configs = 6 if backend == "interp" else 1
    for _ in range(configs):
        args, breakers = _case(rng, vocab)
        stage = DRY(sequence_breakers=breakers, **args)
        if stage.off:
            continue
        hist = _history(rng, int(rng.integers(0, 30)), vocab)
        # the breakers must occur now and then: splice one into the history
        if breakers and hist:
            b = breakers[int(rng.integers(0, len(breakers)))]
            at = int(rng.integers(0, len(hist)))
            hist = hist[:at] + b + hist[at:]
        states = stage.initial(SeqContext(tuple(hist), vocab))
        step = Stepper(stage, vocab, backend)
        for _ in range(6):
            x = _logits(rng, vocab)
            tok = int(rng.choice(hist[-4:])) if hist and rng.random() < 0.7 else int(rng.integers(0, vocab))
            out, states = step.run(x, tok, states)
            want = ref.dry(ref.clean(x), hist, args["multiplier"], args["base"], args["allowed_length"],
                           args["penalty_last_n"], [tuple(b) for b in breakers], args["context_size"])
            assert (np.isfinite(out) == np.isfinite(want)).all(), (hist, breakers, args)
            fin = np.isfinite(want)
            np.testing.assert_allclose(out[fin], want[fin], rtol=1e-5, atol=1e-5, err_msg=str((hist, breakers, args)))
            hist = hist + [tok]


def test_dry_default_window_on_the_device(gpu):
    """llama.cpp's defaults (base 1.75, allowed 2, last_n -1 = 4096 tokens) on a long history, on WGSL."""
    rng = np.random.default_rng(3)
    vocab = 300
    hist = _history(rng, 1500, 40) + [5, 6, 7, 8, 9] * 30
    stage = DRY(0.8, sequence_breakers=[[11], [12, 13]])
    assert stage.span == 2 + max_exponent(1.75) and stage.window == 4096
    x = rng.normal(0, 1, vocab).astype(np.float32)
    out, _ = Stepper(stage, vocab, "wgsl").run(x, 5, stage.initial(SeqContext(tuple(hist), vocab)))
    want = ref.dry(x, hist, 0.8, 1.75, 2, -1, [(11,), (12, 13)])
    assert (want < x).sum() >= 1 and out[5] < x[5] - 1e6  # the 150-token repeat hits the clamp
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_off_values_and_order():
    for off in (DRY(0.0), DRY(1.0, base=0.5), DRY(1.0, penalty_last_n=0), DRY(1.0, penalty_last_n=1)):
        assert off.off and Sampler(0.0, (), (off,)).processors == ()
    s = from_spec("top-k", 0.7, 20, dry_multiplier=0.8, repetition_penalty=1.2, logit_bias={1: 1.0})
    assert [p.name for p in s.processors] == ["logit-bias", "penalties", "dry"]
    d = s.processors[-1]
    assert (d.base, d.allowed_length, d.penalty_last_n) == (1.75, 2, -1) and d.needs_tokenizer
    assert from_spec("greedy", dry_multiplier=0.0).processors == ()
    with pytest.raises(ValidationError, match="dry_base is set but dry_multiplier is not"):
        from_spec("greedy", dry_base=2.0)
    with pytest.raises(ValidationError, match="allowed_length must be an int >= 0"):
        DRY(1.0, allowed_length=-1)
    with pytest.raises(ValidationError, match="multiplier must be a finite number >= 0"):
        DRY(float("nan"))
    with pytest.raises(ValidationError, match="not tokenized yet"):
        DRY(1.0).initial(SeqContext((1, 2), 10))


def test_breaker_sequences_follow_llama_cpp(default_model):
    tok = default_model.tokenizer
    nl = breaker_sequences(tok, "\n")
    assert all(len(s) == 1 for s in nl) and (tok.token_to_id("Ċ"),) in nl
    seqs = breaker_sequences(tok, "User:")
    heads = {s[0]: s[1:] for s in seqs}
    user = tok.encode("User", add_special_tokens=False).ids
    assert len(user) == 1 and heads[user[0]] == tuple(tok.encode(":", add_special_tokens=False).ids)
    assert all(len(s) <= 21 for s in seqs)
    s = from_spec("greedy", dry_multiplier=1.0, dry_sequence_breakers=["User:"]).for_tokenizer(tok)
    assert s.processors[0].tails == tuple(sorted(seqs))


def test_generate_with_dry_avoids_the_repeat(default_model):
    prompt = "one two three four one two three four one two three four one two three"
    plain = default_model.generate(prompt, max_tokens=6)
    plain.run()
    dry = default_model.generate(prompt, max_tokens=6, dry_multiplier=4.0, dry_allowed_length=2)
    dry.run()
    assert plain.text.strip().startswith("four")  # greedy continues the pattern
    assert not dry.text.strip().startswith("four")


def test_cli_dry_flags():
    from piegpu.cli import _checked_options, build_parser
    args = build_parser().parse_args(["generate", "hi", "--dry-multiplier", "0.8", "--dry-base", "2",
                                      "--dry-allowed-length", "3", "--dry-penalty-last-n", "64",
                                      "--dry-sequence-breaker", "\\n", "--dry-sequence-breaker", "User:"])
    (d,) = _checked_options(args)[0].sampler.processors
    assert d == DRY(0.8, 2.0, 3, 64, ["\n", "User:"])
    args = build_parser().parse_args(["generate", "hi", "--dry-multiplier", "1", "--dry-sequence-breaker", "none"])
    assert _checked_options(args)[0].sampler.processors[0].sequence_breakers == ()
    with pytest.raises(ValidationError, match="dry_penalty_last_n is set but dry_multiplier is not"):
        _checked_options(build_parser().parse_args(["generate", "hi", "--dry-penalty-last-n", "5"]))
