"""The server's engine in-process on a tiny random model: many jobs, n choices, prefix reuse, failures kept local."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from piegpu.samplers.rows import RowParams
from piegpu.server.engine import Engine, Job
from tests.helpers import tiny_config, tiny_model

PROMPTS = ["5 17 42 7", "100 3", "250 251 9 9 9 12 40", "77", "8 8 8"]


@pytest.fixture(scope="module")
def tiny(gpu):
    return tiny_model(tiny_config(layers=2, vocab=300), seed=5)[0]


def alone(model, prompt, **kw):
    g = model.generate(prompt, **kw)
    g.run()
    return g.tokens


def run_jobs(engine, jobs, timeout=300) -> dict:
    """Submit the jobs, start the engine, collect every event per job until all are done."""
    q: queue.Queue = queue.Queue()
    for k, job in enumerate(jobs):
        job.emit = (lambda k: lambda ev: q.put((k, ev)))(k)
        engine.submit(job)
    engine.start()
    events = {k: [] for k in range(len(jobs))}
    left = len(jobs)
    while left:
        k, ev = q.get(timeout=timeout)
        events[k].append(ev)
        left -= ev["type"] == "done"
    engine.stop()
    return events


def tokens_of(events, index=0) -> list:
    return [t for ev in events if ev["type"] == "piece" and ev["index"] == index
            for t in (int(x) for x in ev["text"].replace("<", " ").replace(">", " ").split())]


def job(model, prompt, params, max_tokens=6, constraint=None):
    return Job(model.tokenizer.encode(prompt).ids, params, max_tokens, [], None, constraint,
               frozenset(model.config.eos_token_ids))


def test_jobs_prefilled_together_equal_each_prompt_alone(tiny):
    """Five jobs (one with n=3 choices) join at once: prefilled in shared passes, each choice equals its run alone."""
    eng = Engine(tiny, max_batch=8)
    jobs = [job(tiny, p, [RowParams(0.0)]) for p in PROMPTS[:4]]
    jobs.append(job(tiny, PROMPTS[4], [RowParams(0.9, seed=s) for s in (1, 2, 3)]))
    ev = run_jobs(eng, jobs)
    for k, p in enumerate(PROMPTS[:4]):
        assert tokens_of(ev[k]) == alone(tiny, p, max_tokens=6), k
        assert ev[k][-1]["usage"]["completion_tokens"] == 6
    for i, s in enumerate((1, 2, 3)):
        assert tokens_of(ev[4], i) == alone(tiny, PROMPTS[4], max_tokens=6, sampler="temperature", temperature=0.9,
                                            seed=s)
    assert eng.batch.active == [] and eng.load == 0


def test_a_second_turn_shares_the_cached_pages_of_the_first(tiny):
    """A prompt extending a finished one (a chat's second turn) takes its KV pages from the prefix cache: shared,
    only the matched positions of a partly matched last page copied, the same tokens as a fresh prefill."""
    P = tiny.kv_stats()["page_tokens"]
    turn1 = " ".join(str(20 + i) for i in range(2 * P + 5))
    eng = Engine(tiny, max_batch=4)
    first = run_jobs(eng, [job(tiny, turn1, [RowParams(0.0)])])
    assert eng.cache.pages_held >= 2
    eng2 = Engine(tiny, max_batch=4)
    eng2.cache = eng.cache  # the first job's pages are cached
    before = tiny.kv_stats()
    turn2 = turn1 + " " + " ".join(str(t) for t in tokens_of(first[0])) + " 11 12"
    ev = run_jobs(eng2, [job(tiny, turn2, [RowParams(0.0)])])
    cached = ev[0][-1]["usage"]["cached_tokens"]
    assert cached >= len(turn1.split())  # the first turn's prompt, its answer's KV too where it matches
    assert eng2.stats.shared_tokens == cached
    after = tiny.kv_stats()  # at most the partly matched last page's positions copied, when turn 2 wrote into it
    assert after["page_copies"] - before["page_copies"] <= 1
    assert after["copied_positions"] - before["copied_positions"] == cached % P
    assert tokens_of(ev[0]) == alone(tiny, turn2, max_tokens=6)


def test_requests_wait_for_kv_pages_and_none_is_lost():
    """A pool that holds two requests at a time: four requests all finish (two wait their turn), each
    equal to its run alone; one that no pool of this size could hold fails with the fix."""
    from piegpu.model.kv_pool import kv_bytes_per_position
    cfg = tiny_config(layers=2, vocab=300, max_pos=64)
    P = 16
    pages = 64 // P + 1 + 4  # one whole context and page 0, then room for 2 requests of 2 pages
    m = tiny_model(cfg, seed=5, kv_mb=pages * kv_bytes_per_position(cfg, "f32") * P / (1 << 20))[0]
    eng = Engine(m, max_batch=8)
    prompts = [" ".join(str(40 + 3 * k + i) for i in range(12)) for k in range(4)]
    jobs = [job(m, p, [RowParams(0.0)], max_tokens=8) for p in prompts]
    jobs.append(job(m, prompts[0], [RowParams(0.9, seed=s) for s in range(8)], max_tokens=40))
    ev = run_jobs(eng, jobs)
    for k, p in enumerate(prompts):
        assert tokens_of(ev[k]) == alone(m, p, max_tokens=8), k
    errors = [e["message"] for e in ev[4] if e["type"] == "error"]
    assert errors and "KV pages" in errors[0] and "--kv-mb" in errors[0]
    assert eng._kv_committed == 0 and m.kv_stats()["peak_pages_used"] <= pages - 1


class Failing:
    """A constraint that allows every token and fails on its third token."""

    def __init__(self):
        self.n = 0

    def mask_into(self, words):
        words[:] = 0xFFFFFFFF

    def consume(self, token):
        self.n += 1
        if self.n == 3:
            raise RuntimeError("grammar state lost")


def test_a_failing_constraint_fails_its_request_only(tiny):
    eng = Engine(tiny, max_batch=4)
    bad = job(tiny, PROMPTS[0], [RowParams(0.0, constrained=True)], max_tokens=10, constraint=Failing)
    good = job(tiny, PROMPTS[1], [RowParams(0.0)], max_tokens=10)
    ev = run_jobs(eng, [bad, good])
    errors = [e for e in ev[0] if e["type"] == "error"]
    assert errors and "grammar state lost" in errors[0]["message"]
    assert len(tokens_of(ev[0])) <= 3
    assert tokens_of(ev[1]) == alone(tiny, PROMPTS[1], max_tokens=10)
    assert eng.error is None


def test_a_burst_sharing_a_system_prompt_prefills_it_once(tiny):
    """Jobs arriving together with one long shared prefix: the first prefills it, the others copy it."""
    system = " ".join(str(10 + i) for i in range(24))
    prompts = [f"{system} {t} {t + 1}" for t in (200, 210, 220, 230)]
    eng = Engine(tiny, max_batch=8)
    before = tiny.kv_stats()
    ev = run_jobs(eng, [job(tiny, p, [RowParams(0.0)]) for p in prompts])
    cached = [ev[k][-1]["usage"]["cached_tokens"] for k in range(4)]
    assert cached[0] == 0 and all(c >= 24 for c in cached[1:]), cached
    # pages shared: at most a partly filled page copied per request (when it first writes into it)
    after, P = tiny.kv_stats(), tiny.kv_stats()["page_tokens"]
    assert eng.stats.shared_tokens == sum(cached)
    assert eng._kv_committed == 0  # the followers waited for the leader's prefill, each admitted once
    assert after["page_copies"] - before["page_copies"] <= 3
    assert after["copied_positions"] - before["copied_positions"] <= 3 * (P - 1)
    for k, p in enumerate(prompts):
        assert tokens_of(ev[k]) == alone(tiny, p, max_tokens=6), k


def test_a_stopped_engine_refuses_new_jobs_instead_of_holding_them(tiny):
    """Once the engine's thread ended with an error (a lost device), a new job is refused at once with the cause
    (the app answers 503) -- not queued where nothing would ever run it."""
    from piegpu.server.jobs import EngineStopped
    eng = Engine(tiny, max_batch=4)
    eng.error = RuntimeError("the GPU device is lost")
    with pytest.raises(EngineStopped, match="the GPU device is lost"):
        eng.submit(job(tiny, PROMPTS[0], [RowParams(0.0)]))
    assert eng.load == 0


@pytest.mark.parametrize("window", [1, 2, 8])
def test_requests_beyond_the_batch_take_rows_over_as_they_free(tiny, window):
    """max_batch 2 and six requests of different lengths: the ones beyond the two rows are prefilled and wait in
    the batch, then take a row over inside the run as soon as one leaves (no drain); each equals its run alone."""
    eng = Engine(tiny, max_batch=2, window=window)
    lengths = [3, 7, 4, 6, 2, 5]
    prompts = PROMPTS + ["31 4 159"]
    jobs = [job(tiny, p, [RowParams(0.0)], max_tokens=n) for p, n in zip(prompts, lengths)]
    ev = run_jobs(eng, jobs)
    for k, (p, n) in enumerate(zip(prompts, lengths)):
        assert tokens_of(ev[k]) == alone(tiny, p, max_tokens=n), k
        assert ev[k][-1]["type"] == "done" and ev[k][-1]["usage"]["completion_tokens"] == n
    assert eng.batch.stats.handovers >= 2
    assert eng.batch.active == [] and eng.load == 0


def test_a_burst_beyond_one_prefill_pass_starts_within_a_few_passes(tiny):
    """Twelve long prompts at once need several prefill passes; each request's first token comes a few decode passes
    after its prefill, not when an earlier request's row happens to finish (admission at every pass boundary), and
    every request still equals its run alone."""
    eng = Engine(tiny, max_batch=16)
    prompts = [" ".join(str((13 * k + 7 * i) % 290 + 5) for i in range(90)) for k in range(12)]
    jobs = [job(tiny, p, [RowParams(0.0)], max_tokens=40) for p in prompts]
    first_at = {}
    q: queue.Queue = queue.Queue()
    for k, j in enumerate(jobs):
        def emit(ev, k=k):
            if ev["type"] == "piece" and k not in first_at:
                first_at[k] = (eng.batch.stats.decode_passes, eng.stats.prefill_passes)
            q.put((k, ev))
        j.emit = emit
        eng.submit(j)
    eng.start()
    events = {k: [] for k in range(len(jobs))}
    left = len(jobs)
    while left:
        k, ev = q.get(timeout=300)
        events[k].append(ev)
        left -= ev["type"] == "done"
    eng.stop()
    rounds = eng.stats.prefill_passes
    assert rounds >= 3  # the burst did not fit one prefill pass
    # one decode pass between two prefill passes at most: by the last first token, at most ~ a pass a round
    assert max(passes for passes, _ in first_at.values()) <= 2 * rounds + 2, (first_at, rounds)
    for k, p in enumerate(prompts):
        assert tokens_of(events[k]) == alone(tiny, p, max_tokens=40), k


@pytest.mark.parametrize("budget", [16, 64])
def test_a_long_prompt_stalls_running_rows_one_prefill_pass_at_a_time(tiny, budget):
    """Rows decoding when a long prompt arrives: it is prefilled in passes of at most max_pass_tokens tokens, and
    between two tokens of a running row at most one prefill pass runs (the rows' inter-token latency rises by one
    chunk's pass time, not the whole prefill); every output equals its request alone."""
    from piegpu.errors import ValidationError
    for bad in (0, 257, 1.5):
        with pytest.raises(ValidationError, match="max_pass_tokens"):
            Engine(tiny, max_pass_tokens=bad)
    eng = Engine(tiny, max_batch=8, max_pass_tokens=budget)
    short = [job(tiny, p, [RowParams(0.0)], max_tokens=40) for p in PROMPTS[:4]]
    long_prompt = " ".join(str((11 * i) % 280 + 9) for i in range(200))
    late = job(tiny, long_prompt, [RowParams(0.0)], max_tokens=4)
    assert 2 * budget < len(late.prompt_ids) < tiny.context - 4  # several passes, within the tiny model's context
    q: queue.Queue = queue.Queue()
    seen = {k: [] for k in range(5)}  # per job: the prefill passes run when each of its tokens arrived

    def emitter(k):
        def emit(ev):
            if ev["type"] == "piece":
                seen[k].append(eng.stats.prefill_passes)
                if k == 0 and len(seen[0]) == 3:
                    eng.submit(late)  # arrives while the four rows decode
            q.put((k, ev))
        return emit
    for k, j in enumerate(short):
        j.emit = emitter(k)
        eng.submit(j)
    late.emit = emitter(4)
    eng.start()
    events = {k: [] for k in range(5)}
    left = 5
    while left:
        k, ev = q.get(timeout=300)
        assert ev["type"] != "error", ev
        events[k].append(ev)
        left -= ev["type"] == "done"
    eng.stop()
    prompt_len = len(late.prompt_ids)
    assert eng.stats.prefill_passes >= -(-prompt_len // budget)  # the long prompt took passes of <= budget tokens
    for k in range(4):
        gaps = np.diff(seen[k])
        assert gaps.max() <= 1, (k, seen[k])
        assert tokens_of(events[k]) == alone(tiny, PROMPTS[k], max_tokens=40), k
    assert tokens_of(events[4]) == alone(tiny, long_prompt, max_tokens=4)
