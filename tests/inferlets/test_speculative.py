"""Speculative decoding with prompt-lookup drafts verified on the device: identical to greedy decoding."""

from __future__ import annotations

import numpy as np
import pytest

import piegpu

from piegpu import ValidationError
from piegpu.inferlets.speculative import lookup_drafts
from piegpu.textgen.speculation import generate_speculative
from tests.helpers import tiny_config, tiny_model


def test_lookup_drafts():
    seq = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert lookup_drafts(seq, 3, ngram=3) == [7, 8, 1]  # the most recent earlier match wins
    assert lookup_drafts(seq, 6, ngram=3) == [4, 5, 9, 1, 2, 3]  # ... unless only an older one has k tokens
    assert lookup_drafts(seq, 10, ngram=3) == [4, 5, 9, 1, 2, 3, 7, 8, 1, 2]
    assert lookup_drafts([5, 6, 7, 6], 2, ngram=3) == [7, 6]  # falls back to a 1-gram
    assert lookup_drafts([1, 2, 3], 4) == [] and lookup_drafts([4], 2) == []
    assert lookup_drafts([7, 7, 7, 7], 4, ngram=2) == [7, 7]  # overlapping repeats: the longest continuation


@pytest.fixture(scope="module", params=[(11, 300), (5, 96)], ids=["tiny-v300", "tiny-v96"])
def tiny(request, gpu):
    seed, vocab = request.param
    return tiny_model(tiny_config(layers=2, vocab=vocab), seed=seed)[0]


def oracle(truth: list, prompt_len: int, wrong_at: int):
    """A drafter proposing the true greedy continuation, with draft `wrong_at` of each pass corrupted."""
    def drafter(seq, k):
        done = len(seq) - prompt_len  # tokens generated so far (the pending one included)
        d = list(truth[done: done + k])
        if wrong_at < len(d):
            d[wrong_at] = (d[wrong_at] + 1) % 96
        return d
    return drafter


@pytest.mark.parametrize("wrong_at", [0, 2, 99], ids=["first-wrong", "third-wrong", "all-right"])
def test_device_verification_accepts_exactly_the_matching_prefix(tiny, wrong_at):
    """With drafts from the true greedy continuation, each pass accepts exactly the drafts before the wrong one."""
    prompt, n, k = "3 1 4 1 5", 30, 4
    greedy = tiny.generate(prompt, max_tokens=n + k)
    greedy.run()
    truth = greedy.tokens
    assert len(truth) == n + k, "pick a prompt whose greedy continuation has no EOS"
    tokens, st = generate_speculative(tiny, prompt, n, k=k, drafter=oracle(truth, len(prompt.split()), wrong_at))
    assert tokens == truth[:n]
    done = passes = drafted = accepted = 0
    while done < n:  # what the verifier must have done, pass by pass
        d = min(k, n - done - 1)
        acc = d if wrong_at >= d else wrong_at
        passes, drafted, accepted, done = passes + 1, drafted + d, accepted + acc, done + acc + 1
    assert (st.passes, st.drafted, st.accepted) == (passes, drafted, accepted)
    print(f"\noracle drafts, wrong at {wrong_at}: {st.tokens_per_pass:.2f} tokens/pass")


@pytest.mark.parametrize("k,ngram", [(1, 1), (3, 2), (5, 3)])
def test_tiny_models_identical_to_greedy(tiny, k, ngram):
    total_passes = total_tokens = 0
    for prompt in ("5 17 42 7", "1 2 3 1 2 3 1 2", "9 9 9 9 9", "40 41 42 43 44 40 41 42"):
        greedy = tiny.generate(prompt, max_tokens=40)
        greedy.run()
        tokens, st = generate_speculative(tiny, prompt, 40, k=k, ngram=ngram)
        assert tokens == greedy.tokens, (prompt, k)
        assert st.generated == len(tokens) and st.passes <= len(tokens) + 1 and st.accepted <= st.drafted
        total_passes += st.passes
        total_tokens += st.generated
    print(f"\ntiny k={k} n={ngram}: {total_tokens / total_passes:.2f} tokens/pass")


def test_default_model_identical_to_greedy(default_model):
    prompts = ["Repeat the word 'apple' ten times: apple apple apple", "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",
               "Once upon a time"]
    for prompt in prompts:
        greedy = default_model.generate(prompt, max_tokens=32)
        greedy.run()
        tokens, st = generate_speculative(default_model, prompt, 32, k=4, ngram=3)
        assert tokens == greedy.tokens, (prompt, default_model.tokenizer.decode(tokens))
        print(f"\nspeculative on {prompt[:20]!r}: {st.generated} tokens in {st.passes} passes = "
              f"{st.tokens_per_pass:.2f} tokens/pass, acceptance {st.accepted}/{st.drafted} = "
              f"{st.acceptance_rate:.2f}, {st.decode_s:.1f} s (greedy {greedy.stats.decode_s:.1f} s)")
        if prompt.startswith("Repeat"):
            assert st.tokens_per_pass > 2.5  # drafts from the prompt are accepted


def test_default_model_generate_speculative(default_model):
    """generate(speculative="lookup") on the default model: a chat answer that copies the prompt is plain greedy's,
    token for token, with a stop string inside an accepted run; most drafts stand; sampled runs are reproducible;
    a grammar constraint is refused with the fix."""
    text = "The quick brown fox jumps over the lazy dog. " * 3
    prompt = [{"role": "user", "content": "Repeat exactly: " + text}]
    for stop in (None, "lazy dog. The quick"):
        plain = default_model.generate(prompt, chat=True, max_tokens=40, stop=stop)
        plain.run()
        g = default_model.generate(prompt, chat=True, max_tokens=40, stop=stop, speculative="lookup")
        assert g.run() == plain.text and g.tokens == plain.tokens
        if stop is None:  # the whole answer: most drafts stand, far fewer passes than tokens
            assert g.stats.accepted_tokens > g.stats.draft_tokens / 2
            assert g.stats.verify_passes + g.stats.plain_passes < len(g.tokens) / 2
    a = default_model.generate(prompt, chat=True, max_tokens=24, temperature=0.7, top_p=0.9, seed=4,
                               speculative="lookup")
    b = default_model.generate(prompt, chat=True, max_tokens=24, temperature=0.7, top_p=0.9, seed=4)
    assert a.run() == b.run() and a.stats.draft_tokens > 0  # sampled: plain sampling's tokens for the seed
    with pytest.raises(ValidationError, match="constraint"):
        default_model.generate("Hi", speculative="lookup", regex="[a-z]+")


def test_bad_arguments(tiny):
    with pytest.raises(ValidationError, match="k must be an int >= 1"):
        generate_speculative(tiny, "1 2", 4, k=0)
    with pytest.raises(ValidationError, match="prompt is empty"):
        generate_speculative(tiny, "", 4)
    with pytest.raises(ValidationError, match="ngram_min must be <= ngram"):
        tiny.generate("1 2", speculative=piegpu.Lookup(ngram=2, ngram_min=3))
    with pytest.raises(ValidationError, match="draft sources are"):
        tiny.generate("1 2", speculative="eagle")
    with pytest.raises(ValidationError, match="penalties"):  # state that depends on every drawn token
        tiny.generate("1 2", speculative="lookup", temperature=0.7, repetition_penalty=1.2)
    with pytest.raises(ValidationError, match="not built yet"):
        tiny.generate_batch(["1 2", "3 4"], speculative="lookup")
    with pytest.raises(ValidationError, match="n=..., speculative"):
        tiny.generate("1 2", speculative="lookup", n=2, temperature=0.7)
    bad = tiny.generate("1 2 1 2", max_tokens=4, speculative=piegpu.Lookup(drafter=lambda seq, k: [10 ** 6] * k))
    with pytest.raises(ValidationError, match="outside"):
        bad.run()


def test_generate_speculative_is_plain_greedy(tiny):
    """generate(speculative=...) -- adaptive, fixed, k=1 -- gives plain greedy's tokens, stop strings and budgets
    landing inside accepted runs of drafts exactly where plain decoding ends."""
    for prompt in ("1 2 3 1 2 3 1 2", "40 41 42 43 44 40 41 42", "9 9 9 9 9"):
        for stop, max_tokens in ((None, 40), (None, 7), ("3", 40)):
            plain = tiny.generate(prompt, max_tokens=max_tokens, stop=stop)
            plain.run()
            for spec in ("lookup", piegpu.Lookup(k=1), piegpu.Lookup(k=5, ngram=2, adaptive=False)):
                g = tiny.generate(prompt, max_tokens=max_tokens, stop=stop, speculative=spec)
                assert g.run() == plain.text and g.tokens == plain.tokens, (prompt, stop, spec)
                assert g.stats.stop_reason == plain.stats.stop_reason
                s = g.stats
                assert s.speculative == "lookup" and 0 <= s.accepted_tokens <= s.draft_tokens
                assert s.verify_passes + s.plain_passes <= len(g.tokens) + 1


def test_kv_after_speculation_is_plain_decodings(tiny):
    """Rejected drafts leave nothing behind: a plain continuation after a speculative turn on a working set equals
    one after a plain turn (the KV holds exactly the tokens emitted; the last one is pending)."""
    prompt = "1 2 3 1 2 3 1 2"
    runs = []
    for spec in (None, piegpu.Lookup(k=5, adaptive=False)):
        ws = tiny.working_set(128)
        first = tiny.generate(prompt, max_tokens=13, working_set=ws, speculative=spec)
        first.run()
        second = tiny.generate(" 7 8", max_tokens=12, working_set=ws)
        second.run()
        runs.append((first.tokens, ws.length, second.tokens))
    assert runs[0] == runs[1]


def test_sampled_speculation_follows_the_chain(gpu):
    """Speculative sampling is exact in distribution: with a drafter always proposing the likeliest token and
    another, the first token follows the sampler chain's p and the second, after an accepted draft, p given it
    (chi-square against the exact probabilities of the chain on model.logits); and seeded runs draw plain
    sampling's tokens exactly."""
    from scipy.stats import chi2
    tiny = tiny_model(tiny_config(layers=2, vocab=96), seed=5)[0]
    V, T, K = tiny.config.vocab_size, 1.0, 6
    ids = tiny.tokenizer.encode("5 17 42 7").ids

    def chain_p(seq):
        x = tiny.logits(seq)[-1].astype(np.float64) / T
        x[np.argsort(-x)[K:]] = -np.inf
        e = np.exp(x - x.max())
        return e / e.sum()
    p0 = chain_p(ids)
    a = int(np.argmax(p0))
    p1 = chain_p(ids + [a])
    b = int(np.argsort(-p1)[1])  # a draft that is often rejected
    N = 200
    first, second = [], []
    for seed in range(N):
        g = tiny.generate("5 17 42 7", max_tokens=2, temperature=T, top_k=K, seed=seed,
                          speculative=piegpu.Lookup(k=2, adaptive=False, drafter=lambda seq, k: [a, b][:k]))
        g.run()
        first.append(g.tokens[0])
        if g.tokens[0] == a:
            second.append(g.tokens[1])

    def check(draws, p, what):
        counts = np.bincount(draws, minlength=V)
        assert counts[p == 0].sum() == 0, f"{what}: drew tokens the chain excludes"
        live = p > 0
        exp = p[live] * len(draws)
        stat = ((counts[live] - exp) ** 2 / exp).sum()
        pval = chi2.sf(stat, live.sum() - 1)
        assert pval > 1e-3, f"{what}: chi-square p = {pval:.2e} ({counts[live]} vs {exp.round(1)})"
    check(first, p0, "first token")
    assert len(second) > N * p0[a] * 0.6
    check(second, p1, "second token after the accepted draft")
    for seed in range(6):  # token for token what plain sampling draws with the seed, whatever the drafts
        plain = tiny.generate("1 2 3 1 2 3 1 2", max_tokens=24, temperature=T, top_k=K, seed=seed, top_p=0.95)
        plain.run()
        for spec in ("lookup", piegpu.Lookup(k=3, adaptive=False)):
            g = tiny.generate("1 2 3 1 2 3 1 2", max_tokens=24, temperature=T, top_k=K, seed=seed, top_p=0.95,
                              speculative=spec)
            g.run()
            assert g.tokens == plain.tokens, (seed, spec)
