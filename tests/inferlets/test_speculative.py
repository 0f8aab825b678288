"""Speculative decoding with prompt-lookup drafts verified on the device: identical to greedy decoding."""

from __future__ import annotations

import pytest

from piegpu import ValidationError
from piegpu.inferlets.speculative import generate_speculative, lookup_drafts
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


def test_bad_arguments(tiny):
    with pytest.raises(ValidationError, match="k must be an int >= 1"):
        generate_speculative(tiny, "1 2", 4, k=0)
    with pytest.raises(ValidationError, match="prompt is empty"):
        generate_speculative(tiny, "", 4)
    with pytest.raises(ValidationError, match="exceed the model's context"):
        generate_speculative(tiny, "1 2", 10 ** 6)
