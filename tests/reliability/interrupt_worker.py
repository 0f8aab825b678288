"""Interrupting generation (task cancellation, Ctrl-C) and checking the continuation; run in a subprocess.

    python -m tests.reliability.interrupt_worker SCENARIO

prints one JSON line {"ok": bool, "detail": ...}. A subprocess because a broken
interruption can take the whole process down (before the fixes in channel.py and
pipeline.py, a cancelled take recycled a staging buffer whose map was still pending,
and the next submit aborted the process inside wgpu-native).

"Right continuation": the interrupted generation accepted k tokens (Generation.tokens);
a reference generation of exactly k tokens on a fresh working set, followed by the same
second prompt, must give the same second continuation as the interrupted working set.
"""

from __future__ import annotations

import asyncio
import json
import sys

P1, P2 = "5 17 42 7", "9 8"


def _model():
    from tests.helpers import tiny_config, tiny_model
    return tiny_model(tiny_config(layers=2, vocab=300, max_pos=256), seed=3)[0]


def _continuation(model, ws) -> list:
    g = model.generate(P2, max_tokens=12, working_set=ws)
    g.run()
    return g.tokens


def _reference(model, k: int) -> tuple:
    ws = model.working_set(256)
    g = model.generate(P1, max_tokens=k, working_set=ws)
    g.run()
    return g.tokens, _continuation(model, ws)


def _verdict(model, g, ws, label: str) -> dict:
    k = len(g.tokens)
    cont = _continuation(model, ws)
    ref_tokens, ref_cont = _reference(model, k)
    ok = k > 0 and g.tokens == ref_tokens and cont == ref_cont
    return {"label": label, "ok": ok, "accepted": k, "tokens_ok": g.tokens == ref_tokens, "continuation": cont,
            "expected": ref_cont}


def cancel(model, n: int) -> dict:
    """`async for` over model.generate in a task, cancelled after n tokens."""
    ws = model.working_set(256)
    g = model.generate(P1, max_tokens=150, working_set=ws)

    async def consume():
        async for _ in g:
            pass

    async def main():
        task = asyncio.ensure_future(consume())
        while len(g.tokens) < n and not task.done():
            await asyncio.sleep(0.0005)
        if task.done():  # finished or failed before n tokens: report it, never wait forever
            task.result()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    asyncio.run(main())
    return _verdict(model, g, ws, f"cancel after {n}")


def consumer(model, n: int) -> dict:
    """Ctrl-C in the body of a `for piece in model.generate(...)` loop after n pieces."""
    ws = model.working_set(256)
    g = model.generate(P1, max_tokens=150, working_set=ws)
    try:
        for i, _ in enumerate(g):
            if i + 1 == n:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    return _verdict(model, g, ws, f"KeyboardInterrupt in the loop body after {n}")


def loop_interrupt(model, n: int) -> dict:
    """Ctrl-C delivered while the event loop runs (a loop callback raises it), after n tokens."""
    ws = model.working_set(256)
    g = model.generate(P1, max_tokens=150, working_set=ws)
    real_decode = model.tokenizer.decode
    count = [0]

    def decode(ids):
        count[0] += 1
        if count[0] == n:
            def interrupt():
                raise KeyboardInterrupt
            asyncio.get_running_loop().call_soon(interrupt)
        return real_decode(ids)
    model.tokenizer.decode = decode
    try:
        for _ in g:
            pass
    except (KeyboardInterrupt, RuntimeError):
        pass
    finally:
        model.tokenizer.decode = real_decode
    return _verdict(model, g, ws, f"KeyboardInterrupt from the event loop after {n}")


def sigint(model, n: int) -> dict:
    """A real Ctrl-C (SIGINT to the main thread) at a random moment of decoding, while the loop streams."""
    import random
    import threading
    import _thread
    ws = model.working_set(256)
    g = model.generate(P1, max_tokens=150, working_set=ws)
    delay = random.Random(n).uniform(0.0, 0.05)
    try:
        for i, _ in enumerate(g):
            if i == 2:  # decoding has started: the interrupt lands somewhere in the next ~50 ms
                threading.Timer(delay, _thread.interrupt_main).start()
    except KeyboardInterrupt:
        pass
    else:
        return {"label": f"SIGINT after {delay:.3f} s", "ok": False, "detail": "the generation ended first"}
    return _verdict(model, g, ws, f"SIGINT after {delay:.3f} s")


def raw(model, n: int) -> dict:
    """API.md's device loop: the run_ahead task cancelled while on_token awaits a take."""
    from tests.reliability.cases import prefilled_loop
    from tests.runtime.test_pipeline import host_greedy, run
    ids = [5, 17, 42, 7]
    expected = host_greedy(model, ids, 30)
    pipe = model.pipeline()
    ws, fwd, _, token_out = prefilled_loop(pipe, model, ids)
    got: list = []

    async def on_token():
        tok = await token_out.take_scalar()
        got.append(tok)
        return True

    async def main():
        task = asyncio.ensure_future(pipe.run_ahead(fwd, 30, on_token))
        while len(got) < n and not task.done():
            await asyncio.sleep(0)
        task.cancel()  # lands in the next on_token's take (or inside the window's bookkeeping)
        try:
            await task
        except asyncio.CancelledError:
            pass
    run(main())
    first = list(got)
    run(pipe.run_ahead(fwd, 30 - len(first), on_token))
    ok = got == expected and ws.length == len(ids) - 1 + 30
    return {"label": f"raw run_ahead cancelled after {n}", "ok": ok, "accepted": len(first), "got": got,
            "expected": expected}


SCENARIOS = {"cancel": cancel, "consumer": consumer, "loop": loop_interrupt, "raw": raw, "sigint": sigint}


def main(argv) -> int:
    model = _model()
    runs = range(1, 7) if argv[0] == "sigint" else (1, 3, 7)
    results = [SCENARIOS[argv[0]](model, n) for n in runs]
    print(json.dumps({"ok": all(r["ok"] for r in results), "results": results}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
