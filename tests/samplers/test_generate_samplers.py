"""model.generate with stateful samplers: device channels created and seeded by the decode loop, state
loop-carried on the device; checked against a host simulation that reads the logits back every step."""

from __future__ import annotations

import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.eta.counter_rng import rng_uniform
from tests.helpers import tiny_config, tiny_model
from tests.samplers import numpy_samplers as ref


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=11)[0]


def host_logits(model, ids: list):
    """Yields the logits after `ids`, then after each token sent back (host round trip per token)."""
    ws = model.working_set(128)
    logits = model.gpu.forward(ws, ids)[0]
    while True:
        tok = yield logits
        logits = model.gpu.forward(ws, [tok])[0]


def simulate(model, ids: list, n: int, pick) -> list:
    """n tokens from pick(logits, step) with the logits read back each step."""
    gen = host_logits(model, ids)
    logits = next(gen)
    out = []
    for i in range(n):
        tok = pick(logits, i)
        out.append(tok)
        logits = gen.send(tok)
    return out


def test_penalties_count_prompt_and_generated_tokens(tiny):
    ids = [5, 17, 42, 7, 116, 73]
    rp, pp, fp = 1.8, 0.6, 0.4
    counts = np.bincount(ids, minlength=300)

    def pick(logits, i):
        tok = int(np.argmax(ref.penalties(logits, counts, rp, pp, fp)))
        counts[tok] += 1
        return tok
    want = simulate(tiny, ids, 24, pick)
    g = tiny.generate(" ".join(map(str, ids)), max_tokens=24, repetition_penalty=rp, presence_penalty=pp,
                      frequency_penalty=fp)
    g.run()
    assert g.tokens == want
    plain = tiny.generate(" ".join(map(str, ids)), max_tokens=24)
    plain.run()
    assert plain.tokens != want  # the penalties changed the output


def test_penalties_continue_across_generations_on_one_working_set(tiny):
    ids = [9, 8, 7, 6]
    counts = np.bincount(ids, minlength=300)

    def pick(logits, i):
        tok = int(np.argmax(ref.penalties(logits, counts, presence=1.5)))
        counts[tok] += 1
        return tok
    want = simulate(tiny, ids, 16, pick)
    ws = tiny.working_set(64)
    a = tiny.generate("9 8 7 6", max_tokens=8, presence_penalty=1.5, working_set=ws)
    a.run()
    assert a.tokens == want[:8]
    # the last token drawn is pending (not yet embedded); the counts must still include it
    c = tiny.generate("5", max_tokens=6, presence_penalty=1.5, working_set=ws)
    c.run()
    counts2 = np.bincount(ids + want[:8] + [5], minlength=300)

    def pick2(logits, i):
        tok = int(np.argmax(ref.penalties(logits, counts2, presence=1.5)))
        counts2[tok] += 1
        return tok
    assert c.tokens == simulate(tiny, ids + want[:8] + [5], 6, pick2)


def test_mirostat_mu_is_loop_carried_on_the_device(tiny):
    ids = [3, 14, 15, 92]
    tau, lr, seed = 2.5, 0.5, 77
    mu = [2 * tau]

    def pick(logits, i):
        x = ref.clean(logits)
        keep, _ = ref.mirostat_keep(x, mu[0])
        final = np.where(keep, x, -np.inf)
        u = rng_uniform([seed, i], [300]).astype(np.float64)
        tok = int(np.argmax(final - np.log(-np.log(u))))
        mu[0] = ref.mirostat_update(final, tok, mu[0], tau, lr)
        return tok
    want = simulate(tiny, ids, 24, pick)
    g = tiny.generate("3 14 15 92", max_tokens=24, sampler="mirostat", value=tau, mirostat_eta=lr, seed=seed)
    g.run()
    assert g.tokens == want
    # with mu frozen at its start value the draws differ: the device really updates it
    frozen = 2 * tau

    def pick_frozen(logits, i):
        x = ref.clean(logits)
        keep, _ = ref.mirostat_keep(x, frozen)
        u = rng_uniform([seed, i], [300]).astype(np.float64)
        return int(np.argmax(np.where(keep, x, -np.inf) - np.log(-np.log(u))))
    assert simulate(tiny, ids, 24, pick_frozen) != want


def test_seeded_sampling_is_reproducible_and_seed_dependent(tiny):
    runs = []
    for seed in (1, 1, 2):
        g = tiny.generate("1 2 3", max_tokens=12, sampler="typical", value=0.9, seed=seed, repetition_penalty=1.2)
        g.run()
        runs.append(g.tokens)
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_generate_rejects_unknown_options(tiny):
    with pytest.raises(ValidationError, match="unknown arguments"):
        tiny.generate("1 2", max_tokens=2, repetition=1.2)
    with pytest.raises(ValidationError, match="typical: mass"):
        tiny.generate("1 2", max_tokens=2, typical=2.0)
