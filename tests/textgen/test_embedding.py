"""Embedding piegpu in apps: the sync API inside a running event loop and from threads, cancel() from
another thread, on_token callbacks, model.close(), and two models side by side on one device."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from piegpu import ValidationError
from tests.helpers import tiny_config, tiny_model

ROOT = Path(__file__).resolve().parents[2]
P1 = "5 17 42 7"


def _tiny(seed: int):
    return tiny_model(tiny_config(layers=2, vocab=300, max_pos=256), seed=seed)[0]


@pytest.fixture(scope="module")
def tiny(gpu):
    return _tiny(3)


@pytest.fixture(scope="module")
def other(gpu):
    return _tiny(4)


def _greedy(model, prompt=P1, n=12) -> list:
    g = model.generate(prompt, max_tokens=n, stop=[])
    g.run()
    return g.tokens


def _no_asyncio_errors(caplog):
    bad = [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert not bad, bad


# ---- 1. the synchronous API wherever it is called --------------------------------------------------------

def test_sync_api_inside_a_running_loop(tiny, caplog):
    want = tiny.generate(P1, max_tokens=10).run()
    pieces_want = list(tiny.generate(P1, max_tokens=10))

    async def handler():  # an async web handler, a notebook cell: a loop is running in this thread
        text = tiny.generate(P1, max_tokens=10).run()
        pieces = list(tiny.generate(P1, max_tokens=10))
        batch = [g.text for g in tiny.generate_batch([P1, "9 8"], max_tokens=4)]
        samples = tiny.generate(P1, n=2, max_tokens=4, sampler="top-k", k=5).run()
        await asyncio.sleep(0)  # the loop still works afterwards
        return text, pieces, batch, samples
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        text, pieces, batch, samples = asyncio.run(handler())
    assert text == want and pieces == pieces_want and "".join(pieces) == want
    assert batch[0] == tiny.generate(P1, max_tokens=4).run()
    assert len(samples) == 2
    _no_asyncio_errors(caplog)


def test_errors_cross_the_worker_thread_with_their_type(tiny):
    g = tiny.generate(P1, max_tokens=2)
    g.run()

    async def again():
        g.run()  # a Generation runs once
    with pytest.raises(ValidationError, match="already ran"):
        asyncio.run(again())


def test_breaking_out_of_a_sync_iteration_inside_a_loop_rewinds(tiny):
    ws = tiny.working_set(256)
    full = _greedy(tiny, n=12)

    async def cell():
        g = tiny.generate(P1, max_tokens=50, working_set=ws, stop=[])
        for i, _ in enumerate(g):
            if i == 3:
                break
        return g.tokens
    first = asyncio.run(cell())
    rest = tiny.generate("", max_tokens=12 - len(first), working_set=ws, stop=[])
    rest.run()
    assert first + rest.tokens == full


def test_async_for_stays_the_native_path(tiny):
    async def main():
        return [p async for p in tiny.generate(P1, max_tokens=6)]
    assert "".join(asyncio.run(main())) == tiny.generate(P1, max_tokens=6).run()


# ---- 2. threads, cancel, callbacks ----------------------------------------------------------------------

def test_generate_from_worker_threads_while_the_main_thread_generates(tiny):
    prompts = [P1, "9 8", "1 2 3", "200 100"]
    want = {p: _greedy(tiny, p, 16) for p in prompts}
    got: dict = {}
    errors: list = []

    def work(p):
        try:
            got[p] = _greedy(tiny, p, 16)
        except BaseException as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(p,)) for p in prompts[1:]]
    for t in threads:
        t.start()
    got[P1] = _greedy(tiny, P1, 16)  # this thread holds the model too
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert got == want


def _cancelled_run(model, ws, after: int):
    """Run a long generation on a worker thread; cancel it from this thread once `after` pieces arrived."""
    seen = threading.Event()
    pieces: list = []

    def on_token(piece):
        pieces.append(piece)
        if len(pieces) == after:
            seen.set()
    g = model.generate(P1, max_tokens=150, working_set=ws, stop=[], on_token=on_token)
    worker = threading.Thread(target=g.run)
    worker.start()
    assert seen.wait(60)
    at_cancel = len(g.tokens)
    g.cancel()
    worker.join(60)
    assert not worker.is_alive()
    return g, pieces, at_cancel


def test_cancel_from_another_thread_stops_at_the_next_token_and_the_working_set_continues(tiny):
    full = _greedy(tiny, n=40)
    ws = tiny.working_set(256)
    g, pieces, at_cancel = _cancelled_run(tiny, ws, after=3)
    k = len(g.tokens)
    assert g.stats.stop_reason == "cancelled" and g.cancelled
    # the token being drawn when cancel() ran is the last (+1: one accepted between counting and cancel())
    assert 3 <= at_cancel <= k <= at_cancel + 2, (at_cancel, k)
    assert g.tokens == full[:k] and "".join(pieces) == g.text
    rest = tiny.generate("", max_tokens=40 - k, working_set=ws, stop=[])  # continues the same sequence
    rest.run()
    assert g.tokens + rest.tokens == full


def test_cancel_before_decoding_and_inside_a_running_loop(tiny):
    full = _greedy(tiny, n=8)
    ws = tiny.working_set(256)
    g = tiny.generate(P1, max_tokens=8, working_set=ws, stop=[])
    g.cancel()  # before it starts: the prompt is prefilled, nothing is drawn
    assert g.run() == "" and g.tokens == [] and g.stats.stop_reason == "cancelled"
    rest = tiny.generate("", max_tokens=8, working_set=ws, stop=[])

    async def cell():
        return rest.run()
    asyncio.run(cell())
    assert rest.tokens == full


def test_on_token_gets_every_piece_in_order_and_false_stops(tiny):
    pieces: list = []
    g = tiny.generate(P1, max_tokens=10, on_token=pieces.append)
    streamed = list(g)
    assert pieces == streamed and "".join(pieces) == g.text
    # in a worker thread with no loop, as a Qt/Tk app would run it
    got: list = []
    t = threading.Thread(target=lambda: tiny.generate(P1, max_tokens=10, on_token=got.append).run())
    t.start()
    t.join(60)
    assert got == pieces
    stop_at = []
    g = tiny.generate(P1, max_tokens=10, on_token=lambda p: (stop_at.append(p), len(stop_at) < 4)[1])
    g.run()
    assert len(g.tokens) == 4 and g.stats.stop_reason == "cancelled"
    with pytest.raises(ValidationError, match="on_token must be callable"):
        tiny.generate(P1, on_token="print")


# ---- close, context manager, two models ------------------------------------------------------------------

def _resource_mem() -> int:
    import wgpu
    gc.collect()
    return wgpu.diagnostics.object_counts.get_dict().get("Buffer", {}).get("resource_mem", 0)


def test_close_releases_buffers_and_later_use_is_a_clear_error(gpu, tiny):
    before = _resource_mem()
    with _tiny(5) as model:
        ws = model.working_set(64)
        text = model.generate(P1, max_tokens=4, working_set=ws).run()
        assert text
        loaded = _resource_mem() - before
        weights = model.gpu.weight_bytes
        assert loaded > weights
        gpu_model = model.gpu
    assert gpu_model.closed
    assert model.closed
    with pytest.raises(ValidationError, match="model was closed"):
        model.generate(P1)
    with pytest.raises(ValidationError, match="model was closed"):
        model.working_set(8)
    with pytest.raises(ValidationError, match="model was closed"):
        model.pipeline()
    with pytest.raises(ValidationError, match="model was closed"):
        model.session(ws)
    del ws
    # every buffer the model made is gone: weights, KV, scratch, tables, pipeline arenas and channels
    released = _resource_mem() - before
    assert released <= 0, (loaded, released)
    assert model.close() == 0  # twice: nothing more
    m2 = _tiny(7)
    m2.working_set(64)
    kv = m2.kv_stats()["bytes_total"]  # the KV page pool
    assert m2.close() >= m2.gpu.weight_bytes + kv  # destroyed at close(), not only dropped for the GC
    assert tiny.generate(P1, max_tokens=4).run()  # other models on the device are unaffected


def test_close_while_another_thread_generates_fails_that_generation_clearly(gpu):
    model = _tiny(6)
    started = threading.Event()
    errors: list = []

    def work():
        try:
            model.generate(P1, max_tokens=200, stop=[], on_token=lambda p: started.set()).run()
        except BaseException as e:
            errors.append(e)
    t = threading.Thread(target=work)
    t.start()
    assert started.wait(60)
    assert model.close() > model.gpu.weight_bytes * 0  # released something
    t.join(60)
    assert len(errors) == 1 and isinstance(errors[0], ValidationError) and "closed" in str(errors[0]), errors


def test_two_models_side_by_side_alternately_and_from_two_threads(tiny, other):
    a_want, b_want = _greedy(tiny, n=16), _greedy(other, n=16)
    assert a_want != b_want  # different weights, different streams
    ws_a, ws_b = tiny.working_set(64), other.working_set(64)
    a_text = tiny.generate(P1, max_tokens=8, working_set=ws_a, stop=[])
    b_text = other.generate(P1, max_tokens=8, working_set=ws_b, stop=[])
    ia, ib = iter(a_text), iter(b_text)
    for _ in range(8):  # alternate token by token on one device
        next(ia)
        next(ib)
    assert a_text.tokens == a_want[:8] and b_text.tokens == b_want[:8]
    for it in (ia, ib):
        it.close()
    got: dict = {}
    threads = [threading.Thread(target=lambda m=m, k=k: got.__setitem__(k, _greedy(m, n=16)))
               for k, m in (("a", tiny), ("b", other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert got == {"a": a_want, "b": b_want}


# ---- a whole process: no "Task was destroyed", Ctrl-C while a loop is running ----------------------------

SCRIPT = r'''
import asyncio, json, os, signal, threading
from tests.helpers import tiny_config, tiny_model
model = tiny_model(tiny_config(layers=2, vocab=300, max_pos=256), seed=3)[0]
full = model.generate("5 17 42 7", max_tokens=30, stop=[])
full.run()
out = {}

async def cell():
    out["run"] = model.generate("5 17 42 7", max_tokens=6).run()
    out["iter"] = "".join(model.generate("5 17 42 7", max_tokens=6))
    ws = model.working_set(128)
    # Ctrl-C as a Jupyter kernel delivers it (asyncio.run's own handler would cancel this task instead,
    # which a blocking call cannot see before it returns)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main = threading.main_thread().ident
    fired = []

    def on_token(piece):  # a real SIGINT to the main thread, blocked in the sync call
        if not fired:
            fired.append(1)
            signal.pthread_kill(main, signal.SIGINT)
    g = model.generate("5 17 42 7", max_tokens=100, working_set=ws, stop=[], on_token=on_token)
    try:
        g.run()
        out["interrupted"] = False
    except KeyboardInterrupt:
        out["interrupted"] = True
    k = len(g.tokens)
    rest = model.generate("", max_tokens=30 - k, working_set=ws, stop=[])
    rest.run()
    out["continues"] = g.tokens + rest.tokens == full.tokens
    out["accepted"] = k
asyncio.run(cell())
print(json.dumps(out))
'''


def test_in_a_process_no_pending_task_warnings_and_ctrl_c_rewinds(gpu):
    env = dict(os.environ, PYTHONASYNCIODEBUG="1", PYTHONWARNINGS="default")
    r = subprocess.run([sys.executable, "-X", "dev", "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True,
                       timeout=180, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["run"] and out["run"] == out["iter"]
    assert out["interrupted"] and out["accepted"] < 100 and out["continues"], out
    for bad in ("Task was destroyed", "never awaited", "Cannot run the event loop", "Traceback"):
        assert bad not in r.stderr, r.stderr[-3000:]
