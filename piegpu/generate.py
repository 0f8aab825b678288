"""model.generate(): streaming text generation built on run_ahead with a sampling epilogue."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from . import eta
from .channel import Channel
from .dtypes import dtype
from .errors import ValidationError
from .eta import intrinsics
from .forward import ForwardPass, StateGeometry
from .samplers import from_spec, rng_advance

PREFILL_CHUNKS = (256, 128, 64, 32, 16, 8, 4, 2, 1)  # few distinct pass shapes, each compiled once


@dataclass
class GenerationStats:
    """Timings of one generation."""

    prompt_tokens: int = 0
    generated: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    stop_reason: str = ""

    @property
    def decode_tokens_per_s(self) -> float:
        """Generated tokens per second of decoding."""
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0


@dataclass
class _DecodeLoop:
    fwd: ForwardPass
    token_in: Channel
    token_out: Channel
    rng: Channel | None


@dataclass
class _SeqState:
    """What a working set needs between generations: reusable passes and the token not yet embedded."""

    prefill: dict = field(default_factory=dict)  # T -> (fwd, tokens channel)
    decode: dict = field(default_factory=dict)  # sampler -> _DecodeLoop
    pending: int | None = None


class Generation:
    """One streaming generation: iterate (for/async for) to get text pieces as tokens arrive."""

    def __init__(self, model, prompt: str, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                 seed: int = 0, stop=None, working_set=None, chat: bool = False, **sampler_args):
        if not isinstance(prompt, str):
            raise ValidationError(f"generate: prompt must be a str, got {type(prompt).__name__}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValidationError(f"generate: max_tokens must be an int >= 1, got {max_tokens!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < (1 << 32):
            raise ValidationError(f"generate: seed must be an int in [0, 2^32), got {seed!r}")
        self.model = model
        self.prompt = model.chat_prompt(prompt) if chat else prompt
        self.max_tokens = max_tokens
        value = sampler_args.pop("value", None)
        for k in ("k", "p", "a"):
            if k in sampler_args:
                value = sampler_args.pop(k)
        if sampler_args:
            raise ValidationError(f"generate: unknown arguments {sorted(sampler_args)}")
        self.sampler = from_spec(sampler, temperature, value)
        self.seed = seed
        self.stop_ids, self.stop_strings = self._stops(stop)
        ids = model.tokenizer.encode(self.prompt).ids
        self.ws = working_set
        seq = self._seq()
        if seq is not None and seq.pending is not None:
            ids = [seq.pending] + ids
        if not ids:
            raise ValidationError("generate: the prompt is empty (no tokens). Fix: pass some text")
        self.prompt_ids = ids
        start = working_set.length if working_set is not None else 0
        limit = working_set.max_tokens if working_set is not None else model.config.max_position_embeddings
        if start + len(ids) > limit:
            raise ValidationError(f"generate: the prompt has {len(ids)} tokens but the context has room for "
                                  f"{limit - start}. Fix: a shorter prompt or a larger working set")
        self.budget = min(max_tokens, limit - start - len(ids) + 1)
        self.tokens: list = []
        self.text = ""
        self.stats = GenerationStats(prompt_tokens=len(ids))
        self._done = False

    def _stops(self, stop):
        ids = set(self.model.config.eos_token_ids)
        strings = []
        for s in ([] if stop is None else [stop] if isinstance(stop, (str, int)) else list(stop)):
            if isinstance(s, bool) or not isinstance(s, (str, int)):
                raise ValidationError(f"generate: stop entries are strings or token ids, got {s!r}")
            if isinstance(s, int):
                ids.add(s)
            elif s:
                strings.append(s)
        return ids, strings

    def _seq(self) -> _SeqState | None:
        return None if self.ws is None else getattr(self.ws, "_generation", None)

    # ---- iteration -------------------------------------------------------------------------------
    def __iter__(self):
        loop = asyncio.new_event_loop()
        agen = self.__aiter__()
        try:
            while True:
                try:
                    yield loop.run_until_complete(agen.__anext__())
                except StopAsyncIteration:
                    break
        finally:
            loop.run_until_complete(agen.aclose())
            loop.close()

    def __aiter__(self):
        return self._stream()

    def run(self) -> str:
        """Generate to the end and return the whole text."""
        for _ in self:
            pass
        return self.text

    # ---- the work -------------------------------------------------------------------------------
    async def _stream(self):
        if self._done:
            raise ValidationError("this Generation already ran. Fix: call model.generate(...) again")
        self._done = True
        model = self.model
        if model._pipeline is None:
            model._pipeline = model.pipeline()
        pipe = model._pipeline
        if self.ws is None:
            need = min(model.config.max_position_embeddings, len(self.prompt_ids) + self.max_tokens + 1)
            self.ws = model.working_set(need)
        seq = getattr(self.ws, "_generation", None)
        if seq is None:
            seq = self.ws._generation = _SeqState()
        t0 = time.perf_counter()
        await self._prefill(pipe, seq, self.prompt_ids[:-1])
        loop = self._decode_loop(seq)
        loop.token_in.clear()
        loop.token_in.put([self.prompt_ids[-1]])
        if loop.rng is not None:
            loop.rng.clear()
            loop.rng.put([self.seed, 0])
        self.stats.prefill_s = time.perf_counter() - t0
        queue: asyncio.Queue = asyncio.Queue()
        emitted = [0]

        async def on_token():
            tok = await loop.token_out.take_scalar()
            if tok in self.stop_ids:
                seq.pending = tok
                self.stats.stop_reason = "stop token"
                return False
            self.tokens.append(tok)
            text = model.tokenizer.decode(self.tokens)
            cut = min((text.find(s) for s in self.stop_strings if s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
                self.stats.stop_reason = "stop string"
            if not text.endswith("\ufffd") or cut >= 0:
                piece = text[emitted[0]:]
                emitted[0] = len(text)
                self.text = text
                if piece:
                    queue.put_nowait(piece)
            seq.pending = tok
            if cut >= 0:
                return False
            return len(self.tokens) < self.budget

        t1 = time.perf_counter()
        task = asyncio.ensure_future(pipe.run_ahead(loop.fwd, self.budget, on_token))
        try:
            while True:
                get = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({get, task}, return_when=asyncio.FIRST_COMPLETED)
                if get in done:
                    yield get.result()
                    continue
                get.cancel()
                while not queue.empty():
                    yield queue.get_nowait()
                task.result()
                break
        finally:
            if not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        self.stats.decode_s = time.perf_counter() - t1
        self.stats.generated = len(self.tokens)
        if not self.stats.stop_reason:
            self.stats.stop_reason = "max_tokens"

    async def _prefill(self, pipe, seq: _SeqState, ids: list) -> None:
        pos = 0
        while pos < len(ids):
            T = next(c for c in PREFILL_CHUNKS if c <= len(ids) - pos)
            fwd, ch = seq.prefill.get(T) or self._prefill_pass(seq, T)
            ch.put(ids[pos: pos + T])
            await pipe.submit(fwd)
            pos += T

    def _prefill_pass(self, seq: _SeqState, T: int):
        ch = Channel([T], dtype.i32).named(f"prompt[{T}]")
        fwd = ForwardPass()
        fwd.embed(ch, Channel.from_([0, T], dtype.u32))
        fwd.state([self.ws], StateGeometry.folding())
        seq.prefill[T] = (fwd, ch)
        return fwd, ch

    def _decode_loop(self, seq: _SeqState) -> _DecodeLoop:
        loop = seq.decode.get(self.sampler)
        if loop is not None:
            return loop
        from .channel import channel_capacity
        token_in = Channel([1], dtype.i32).named("token_in")
        token_out = Channel([1], dtype.i32).named("token_out").capacity(channel_capacity())
        rng = Channel([2], dtype.u32).named("rng_state") if self.sampler.needs_rng else None
        fwd = ForwardPass()
        fwd.embed(token_in, Channel.from_([0, 1], dtype.u32))
        fwd.state([self.ws], StateGeometry.folding())
        sampler = self.sampler

        @fwd.epilogue
        def _():
            logits = intrinsics.output(0, "logits")
            state = rng.take() if rng is not None else None
            token = eta.reshape(eta.cast(sampler.sample(logits, state), dtype.i32), [1])
            if rng is not None:
                rng.put(rng_advance(state))
            token_in.put(token)
            token_out.put(token)

        loop = seq.decode[self.sampler] = _DecodeLoop(fwd, token_in, token_out, rng)
        return loop
