"""The server's engine: one thread runs the model, every active request is a row of the same decode pass.

HTTP handlers submit Jobs from their own event loop; the engine thread (with its own loop)
admits them between passes, prefills each joining prompt in chunks interleaved with the
decode passes of the others (reusing a cached KV prefix when the prompt starts with one),
forks the prefilled state for n > 1 choices, and runs a runtime Batch: one pass samples
every row on the device with that row's parameters as data. Each drawn token becomes a
text piece (stop strings held back), sent to the job's consumer through a thread-safe
callback. A cancelled job leaves the batch before the next pass.
"""

from __future__ import annotations

import asyncio
import threading
import time

from ..runtime import waits
from ..runtime.batch import Batch
from ..runtime.session import PREFILL_CHUNKS, prefill_together, shared_prefix
from ..samplers.rows import RowSampling
from ..textgen.tokens import TokenOutput, admit, finish_reason
from .admission import CPU_PASS_TOKENS, MAX_PASS_TOKENS, check_pass_tokens, pages_needed
from .jobs import Choice, EngineStats, EngineStopped, Guarded, Job, QueueFull
from .latency import Latencies
from .prefix_cache import PrefixCache
from .text import TokenText

WS_ROUND = 256  # working sets are allocated in multiples of this many positions
SHARE_MIN = 16  # a joining prompt sharing this many tokens with an earlier joining one copies them from it


class Engine:
    """Runs a model for many concurrent requests (see the module docstring)."""

    def __init__(self, model, max_batch: int = 16, max_queue: int = 64, ctx: int | None = None,
                 cache_mb: float = 512.0, prefill_chunk: int = 128, window: int | None = None,
                 max_pass_tokens: int | None = None):
        if max_pass_tokens is None:
            max_pass_tokens = CPU_PASS_TOKENS if model.gpu.dev.is_cpu else MAX_PASS_TOKENS
        check_pass_tokens(max_pass_tokens)
        self.model = model
        self.max_pass_tokens = max_pass_tokens  # prompt tokens one prefill pass takes at most
        self.vocab = model.config.vocab_size
        self.ctx = min(ctx or model.context, model.context)
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.prefill_chunk = prefill_chunk
        self.batch = Batch(model, RowSampling(self.vocab), max_batch=max_batch, prefill_chunk=prefill_chunk,
                           window=window)
        # a request arrived or left, the server is stopping (the grace time is checked between runs), or a waiting
        # request could take its next prefill chunk now: the run ends at its next read (admission at every pass
        # boundary, not when a running row happens to finish)
        self.batch.interrupt = lambda: self._poked or self._stopping or self._prefill_waits()
        # requests prefilled beyond max_batch rows wait in the batch and take a row over as soon as one leaves,
        # inside the run (runtime/batch_run.py); a request whose row was handed over finishes right then
        self.standby = max_batch
        self.batch.on_leave = self._collect
        self._poked = False
        pool = model.gpu.kv
        self.cache = PrefixCache(pool, int(cache_mb * (1 << 20)) // pool.bytes_per_page)  # the bound in pages
        self.token_text = TokenText(model.tokenizer)
        self._lock = threading.Lock()
        self._inbox: list = []
        self._joining: list = []  # admitted jobs still prefilling, in arrival order
        self._running: list = []  # jobs with choices in the batch
        self._kv_committed = 0  # KV pages set aside for admitted jobs (their whole lengths)
        self._loop = asyncio.new_event_loop()
        self._wake: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="piegpu-engine", daemon=True)
        self._stopping = False
        self._deadline: float | None = None
        self.error: BaseException | None = None
        self.completed = 0
        self.stats = EngineStats(window=self.batch.window)
        self.latency = Latencies()  # TTFT, inter-token, queue and end-to-end histograms (GET /metrics)

    # ---- the HTTP side (any thread) ----------------------------------------------------------
    def start(self) -> None:
        """Start the engine thread."""
        self._thread.start()

    @property
    def load(self) -> int:
        """Requests admitted and not finished."""
        with self._lock:
            return len(self._inbox) + len(self._joining) + len(self._running)

    def counts(self) -> dict:
        """Requests by state: waiting (queued, no KV yet), prefilling, running (rows of the decode passes)."""
        with self._lock:
            inbox, joining, running = len(self._inbox), list(self._joining), len(self._running)
        waiting = inbox + sum(1 for j in joining if j.session is None)
        return {"waiting": waiting, "prefilling": inbox + len(joining) - waiting, "running": running}

    def submit(self, job: Job) -> None:
        """Queue a job (QueueFull when max_queue requests are waiting or running; EngineStopped once it failed)."""
        if self._stopping:
            raise QueueFull("the server is shutting down")
        with self._lock:  # (under the lock: _main fails every job it lists once self.error is set)
            if self.error is not None:
                raise EngineStopped(f"the engine stopped: {type(self.error).__name__}: {self.error}")
            if len(self._inbox) + len(self._joining) + len(self._running) >= self.max_queue:
                raise QueueFull(f"{self.max_queue} requests are queued or running")
            self._inbox.append(job)
        self._poke()

    def cancel(self, job: Job) -> None:
        """Cancel a job (a client went away); its rows leave at the next pass."""
        job.cancel()
        self._poke()

    def begin_stop(self, grace_s: float = 0.0) -> None:
        """Admit nothing more; running jobs may finish for up to grace_s seconds, then they are cancelled."""
        if not self._stopping:
            self._stopping = True
            self._deadline = time.perf_counter() + grace_s
        self._poke()

    def stop(self, grace_s: float = 0.0) -> None:
        """begin_stop(grace_s), then wait for the engine thread to end."""
        self.begin_stop(grace_s)
        if self._thread.is_alive():
            self._thread.join()

    def _poke(self) -> None:
        self._poked = True
        if self._wake is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop closed meanwhile
                pass

    # ---- the engine thread ---------------------------------------------------------------------
    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            # only the engine's coroutines run on this loop: their reads may block the thread (runtime/waits.py)
            self._loop.run_until_complete(self._loop.create_task(self._serve(), context=waits.blocking_context()))
        except BaseException as e:  # noqa: BLE001 -- every waiting client must hear about it
            self.error = e
            for job in self._all_jobs():
                self._fail(job, f"the engine stopped: {type(e).__name__}: {e}")
        finally:
            self._loop.close()

    def _all_jobs(self) -> list:
        with self._lock:
            return self._inbox + self._joining + self._running

    async def _serve(self) -> None:
        self._wake = asyncio.Event()
        while True:
            with self._lock:
                self._joining += self._inbox
                self._inbox = []
            if self._stopping and (self._deadline is None or time.perf_counter() >= self._deadline):
                for job in self._joining + self._running:
                    if not job.cancelled:
                        self._fail(job, "the server is shutting down; the request was cancelled")
                        job.cancel()
            for job in [j for j in self._joining if j.cancelled]:
                self._finish_job(job, cancelled=True)
            self._poked = False  # what poked it so far is dealt with in this round
            prefilled = await self._prefill_round()
            if self.batch.active:
                t0 = time.perf_counter()
                b = self.batch.stats
                before = b.decode_passes, b.rows, b.host_waits
                await self.batch.step()
                self.stats.decode_s += time.perf_counter() - t0
                self.stats.decode_passes += b.decode_passes - before[0]
                self.stats.decode_rows += b.rows - before[1]
                self.stats.host_waits += b.host_waits - before[2]
                self._collect()
            elif not prefilled:
                with self._lock:
                    idle = not self._inbox and not self._joining and not self._running
                if self._stopping and idle:
                    return
                if self._stopping and self._deadline is not None:
                    try:
                        await asyncio.wait_for(self._wake.wait(), max(0.0, self._deadline - time.perf_counter()))
                    except asyncio.TimeoutError:
                        pass
                else:
                    await self._wake.wait()
                self._wake.clear()

    def _rows_in_use(self) -> int:
        """Rows of the batch held by sequences that have not left (running, or prefilled and waiting for a row)."""
        return sum(1 for s in self.batch.sequences if not s.done)

    def _prefill_waits(self) -> bool:
        """Whether the first joining request (arrival order) could take a prefill pass now: rows and KV pages free."""
        if not self._joining:
            return False
        job = self._joining[0]
        if job.cancelled:
            return True
        if self._rows_in_use() + len(job.params) > self.max_batch + self.standby:
            return False
        if job.session is not None or job.kv_pages:  # prefilling, or admitted and waiting for its leader
            return True
        return self._kv_committed + pages_needed(job, self.model.gpu.kv.page) <= self.model.gpu.kv.pages_total - 1

    async def _prefill_round(self) -> bool:
        """One prefill pass over as many joining prompts as fit (in arrival order); False if none could.

        Each joining job whose choices fit in the batch gets the next chunk of its prompt; the
        chunks together are at most max_pass_tokens tokens and are trimmed to one of the
        PREFILL_CHUNKS sizes (few distinct pass shapes). Jobs whose prompt is then in the KV
        (all but its last token) join the batch. A job whose prompt shares at least SHARE_MIN
        tokens with an earlier joining one (requests arriving together with one system prompt)
        waits until that one's KV holds the shared part, then copies it instead of prefilling it.
        """
        rows = self._rows_in_use()
        budget = self.max_pass_tokens
        picks = []  # [job, tokens this round]
        for job in list(self._joining):
            if rows + len(job.params) > self.max_batch + self.standby:
                break  # keep arrival order: the first one that does not fit waits for room
            if job.session is None and not job.kv_pages:  # (a job waiting for its leader is admitted already)
                admitted = self._admit(job)
                if admitted is None:
                    continue  # failed: it can never fit
                if not admitted:
                    break  # the KV pool cannot hold it next to the running ones yet: it waits, in arrival order
            if job.session is None:
                leader, shared = self._leader(job)
                if leader is not None and shared > self.cache.peek(job.prompt_ids, job.ns):
                    if leader.prefilled < shared:
                        rows += len(job.params)  # its rows stay reserved while it waits
                        continue
                    job.session = self._start_session(job, leader.session, shared)
                else:
                    job.session = self._start_session(job)
            take = min(len(job.prompt_ids) - 1 - job.prefilled, budget)
            if take == 0 and job.prefilled < len(job.prompt_ids) - 1:
                break
            picks.append([job, take])
            budget -= take
            rows += len(job.params)
        if not picks:
            return False
        total = sum(n for _, n in picks)
        if total:
            cut = total - next(c for c in PREFILL_CHUNKS if c <= total)  # trim the newest picks to a chunk size
            for pick in reversed(picks):
                d = min(cut, pick[1])
                pick[1] -= d
                cut -= d
            parts = [(job.session, job.prompt_ids[job.prefilled: job.prefilled + n]) for job, n in picks if n]
            t0 = time.perf_counter()
            await prefill_together(self.model.default_pipeline, parts)
            self.stats.prefill_s += time.perf_counter() - t0
            self.stats.prefill_passes += 1
            self.stats.prefill_tokens += sum(n for _, n in picks)
            for pick in picks:
                pick[0].prefilled += pick[1]
        for job, _ in picks:
            if job.prefilled >= len(job.prompt_ids) - 1:
                try:
                    self._join(job)
                except Exception as e:  # noqa: BLE001 -- this request fails, the others go on
                    self._fail(job, f"{type(e).__name__}: {e}")
                    job.cancel()
                    if job not in self._running:
                        self._running.append(job)
        return True

    def _admit(self, job: Job) -> bool | None:
        """Set KV pages aside for job's whole length (prompt + max_tokens, every choice); False while the
        pool cannot hold them beside the admitted jobs' (the job waits). A job no pool of this size could
        ever hold fails with the fix (None)."""
        pool = self.model.gpu.kv
        P = pool.page
        need = pages_needed(job, self.model.gpu.kv.page)
        usable = pool.pages_total - 1
        if need > usable:
            self._fail(job, f"the request needs {need} KV pages of {P} positions ({len(job.params)} choice(s) of "
                            f"up to {len(job.prompt_ids) + job.max_tokens} positions) but the server's pool has "
                            f"{usable}. Fix: fewer choices or max_tokens, or start the server with a larger --kv-mb")
            job.cancel()
            self._finish_job(job, cancelled=True)
            return None
        if self._kv_committed + need > usable:
            return False
        job.kv_pages = need
        self._kv_committed += need
        return True

    def _leader(self, job: Job) -> tuple:
        """(an earlier joining job with a session, tokens its prompt shares with job's) for the longest share."""
        want = job.prompt_ids[:-1]
        best, best_n = None, 0
        for other in self._joining:
            if other is job:
                break
            if other.session is None or other.cancelled or other.ns != job.ns:  # (KV of another adapter: no share)
                continue
            n = shared_prefix(other.prompt_ids[:-1], want)
            if n > best_n:
                best, best_n = other, n
        return (best, best_n) if best_n >= SHARE_MIN else (None, 0)

    def _start_session(self, job: Job, source=None, n: int = 0):
        """A session for job: a fresh working set holding the first n prompt tokens copied from `source`
        (another session), or else the longest prefix the prefix cache holds, or nothing."""
        need = min(self.ctx, len(job.prompt_ids) + job.max_tokens)
        size = min(self.model.context, -(-need // WS_ROUND) * WS_ROUND)
        pages = []
        if source is None:
            pages, n = self.cache.take(job.prompt_ids, job.ns)
        ws = self.model.working_set(max(size, n))
        ws.run_under(job.adapter)
        sess = self.model.session(ws)
        job.started = time.perf_counter()
        self.latency.queue.observe(job.started - job.submitted)
        if n:
            if source is not None:
                ws.share_from(source.ws, n)  # a partly filled last page is copied when one of them writes into it
            else:
                ws.share_pages(pages, n)  # a partly matched last page is copied when ws first writes into it
            self.stats.shared_tokens += n
            sess.tokens = list(job.prompt_ids[:n])
            job.cached_tokens = job.prefilled = n
        return sess

    def _join(self, job: Job) -> None:
        self._joining.remove(job)
        sessions = [job.session] + [job.session.fork() for _ in job.params[1:]]
        for i, (p, sess) in enumerate(zip(job.params, sessions)):
            c = Choice(i, p, TokenOutput(self.model.tokenizer, job.stop_ids, job.stops, job.max_tokens))
            if job.constraint is not None:
                c.constraint = Guarded(c, job.constraint())
            c.seq = admit(self.batch, c.out, job.prompt_ids, p, session=sess, constraint=c.constraint,
                          on_token=self._on_token(job, c), adapter=job.adapter, automaton=job.automaton)
            job.choices.append(c)
        self._running.append(job)
        self.stats.prompt_tokens += len(job.prompt_ids) - job.cached_tokens
        # its prompt's KV is final: later prompts share its full pages (it goes on writing into the last one)
        self.cache.put(job.session.tokens[: job.session.ws.length], job.session.ws.pages, partial=False, ns=job.ns)

    def _on_token(self, job: Job, c: Choice):
        def on_token(seq, tok, piece):
            if c.error:
                return False
            try:
                c.tokens += 1
                self.stats.tokens_predicted += 1
                now = time.perf_counter()
                if not job.first_token:
                    job.first_token = now
                    self.latency.ttft.observe(now - job.submitted)
                if c.last_token:
                    self.latency.itl.observe(now - c.last_token)
                c.last_token = now
                entry = None
                if c.params.logprobs:
                    top = seq.top_logprobs[-1] if c.params.top_logprobs else []
                    entry = (tok, seq.logprobs[-1], top)
                if piece or entry is not None:
                    job.emit({"type": "piece", "index": c.index, "text": piece,
                              "tokens": [entry] if entry is not None else []})
                return True
            except Exception as e:  # noqa: BLE001 -- this choice fails, the batch goes on
                c.error = f"{type(e).__name__}: {e}"
                return False
        return on_token

    def _collect(self) -> None:
        """Report the choices that finished in the last pass; finished jobs leave and feed the prefix cache."""
        for job in list(self._running):
            failed = next((c.error for c in job.choices if c.error), "")
            if failed and not job.cancelled:
                self._fail(job, failed)
                job.cancel()  # the other choices leave at the next pass
            for c in job.choices:
                if c.seq.error and not c.error:  # the KV pool could not hold it (the others go on)
                    c.error = c.seq.error
                    if not job.cancelled:
                        self._fail(job, c.error)
                        job.cancel()
                if c.seq.done and not c.finish_reason:
                    c.finish_reason = "length" if c.seq.finish_reason == "length" else (
                        "cancelled" if c.seq.finish_reason == "cancelled" else "stop")
                    if c.finish_reason != "cancelled" and not job.cancelled:
                        rest = c.out.finish(finish_reason(c.seq))
                        if rest:
                            job.emit({"type": "piece", "index": c.index, "text": rest, "tokens": []})
                        job.emit({"type": "finish", "index": c.index, "reason": c.finish_reason})
            if all(c.finish_reason for c in job.choices):
                self._finish_job(job, cancelled=job.cancelled)
        self.batch.drop_finished()

    def _finish_job(self, job: Job, cancelled: bool) -> None:
        self._kv_committed -= job.kv_pages
        job.kv_pages = 0
        if job in self._running:
            self._running.remove(job)
        if job in self._joining:
            self._joining.remove(job)
        if job.session is not None and (job.choices or job.prefilled):
            self.cache.put(job.session.tokens[: job.session.ws.length], job.session.ws.pages, ns=job.ns)
        # its KV pages go back to the pool now (the cache keeps its own references), not when the response is
        # garbage collected. Passes of its rows may still be in flight (a row handed over inside a run): they
        # write past its length only, and whatever takes those pages writes them in passes queued after them
        sessions = [job.session] + [c.seq.session for c in job.choices if c.seq is not None]
        for sess in sessions:
            if sess is not None:
                sess.ws.release()
        job.session = None
        self.completed += 1
        job.finished = time.perf_counter()
        self.stats.requests_finished += 1
        if not cancelled and job.choices and all(c.finish_reason in ("stop", "length") for c in job.choices):
            self.latency.e2e.observe(job.finished - job.submitted)
        longest = len(job.prompt_ids) + max((c.tokens for c in job.choices), default=0)
        self.stats.n_tokens_max = max(self.stats.n_tokens_max, longest)
        usage = {"prompt_tokens": len(job.prompt_ids), "completion_tokens": sum(c.tokens for c in job.choices),
                 "cached_tokens": job.cached_tokens}
        job.emit({"type": "done", "usage": usage, "cancelled": cancelled})

    def _fail(self, job: Job, message: str) -> None:
        try:
            job.emit({"type": "error", "message": message})
        except Exception:  # noqa: BLE001 -- a consumer that is gone
            pass
