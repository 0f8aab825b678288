"""model.generate(): streaming text generation built on run_ahead with a sampling epilogue."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ..errors import ValidationError
from ..runtime.window import check_window
from ..runtime.loops import DecodeLoop, decode_loop
from ..runtime.session import iterate_sync, run_sync
from ..samplers import SamplerStates, SeqContext
from ..samplers.options import SamplingOptions
from ..samplers.program import ProgramSampler, ProgramStates
from .tokens import MAX_TOKENS, TokenOutput

@dataclass
class GenerationStats:
    """Timings of one generation."""

    prompt_tokens: int = 0  # embedded by this generation (with reuse_prefix: the part not reused)
    generated: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    stop_reason: str = ""
    reused_tokens: int = 0  # prompt tokens whose KV the working set already held (reuse_prefix=True)
    host_waits: int = 0  # host readbacks that delivered this generation's tokens (batched: one per window)
    kv_pages: int = 0  # KV pool pages its working set held when it ended (shared ones included)
    kv_pages_used: int = 0  # pages the model's whole pool had in use then, of kv_pages_total
    kv_pages_total: int = 0
    speculative: str | None = None  # the draft source (speculative=...), None without
    draft_tokens: int = 0  # drafts proposed to verify passes
    accepted_tokens: int = 0  # of them, the ones that stood
    verify_passes: int = 0  # passes that verified drafts
    plain_passes: int = 0  # one-token passes between them (speculative runs back off to these)
    grammar: str | None = None  # a constraint's path: "device" (automaton in the epilogue) or "host" (llguidance)
    grammar_reason: str = ""  # why that path (textgen/grammar_run.py)

    @property
    def decode_tokens_per_s(self) -> float:
        """Generated tokens per second of decoding."""
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0


@dataclass
class _Sampling:
    """generate()'s decode loop and the sampler state channels its epilogue uses."""

    loop: DecodeLoop
    states: SamplerStates


class Generation:
    """One streaming generation: iterate (for/async for) to get text pieces as tokens arrive.

    `on_token(piece)`, if given, is called with each text piece as it arrives (in the thread
    running the generation; returning False cancels it): for toolkits without asyncio.

    With `chat=True` the prompt may also be a list of {role, content} messages. With
    `reuse_prefix=True` (and a working_set) the prompt is the whole sequence -- a chat's history
    rendered again each turn -- and the working set keeps the longest common prefix of the tokens
    it holds and the prompt's, so only the rest is prefilled (stats.reused_tokens says how many were kept).
    """

    def __init__(self, model, prompt: str | list, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                 seed: int = 0, stop=None, working_set=None, chat: bool = False, watermark=None, on_token=None,
                 reuse_prefix: bool = False, window: int | None = None, adapter=None, adapter_scale: float = 1.0,
                 speculative=None, **sampler_args):
        if on_token is not None and not callable(on_token):
            raise ValidationError(f"generate: on_token must be callable (called with each text piece), "
                                  f"got {on_token!r}")
        model.check_open()
        if chat and isinstance(prompt, (str, list, tuple)):  # a user string, or the messages of a chat
            prompt = model.chat_prompt(prompt if isinstance(prompt, str) else list(prompt))
        elif chat:
            raise ValidationError(f"generate(chat=True): prompt must be a str or a list of {{role, content}} "
                                  f"messages, got {type(prompt).__name__}")
        elif not isinstance(prompt, str):
            raise ValidationError(f"generate: prompt must be a str, got {type(prompt).__name__}")
        if reuse_prefix and working_set is None:
            raise ValidationError("generate(reuse_prefix=True) reuses the KV that a working set holds. "
                                  "Fix: pass working_set=model.working_set(N) and keep it across calls")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValidationError(f"generate: max_tokens must be an int >= 1, got {max_tokens!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < (1 << 32):
            raise ValidationError(f"generate: seed must be an int in [0, 2^32), got {seed!r}")
        self.model = model
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.lora = model._adapters.use(adapter, adapter_scale)  # the LoRA it runs under (textgen/adapters.py)
        self.window = None if window is None else check_window(window, "generate")  # None: the pipeline's
        from ..inferlets.grammar import REQUEST_KEYS, Constraint, pop_request
        from .grammar_run import plan
        # grammar=/lark=/regex=/json_schema=/json_object=: checked (llguidance's message) before any device work
        request = pop_request(sampler_args)
        self.constraint = Constraint.from_request(model, **request)
        self.grammar = plan(model, request, sampler_args.pop("grammar_mode", "auto"), self.constraint)
        self.grammar_stats = None
        self.options = SamplingOptions.of(sampler, temperature, also=("watermark", *REQUEST_KEYS), **sampler_args)
        if self.options.is_program and self.constraint is not None:
            raise ValidationError("generate(sampler=program) cannot take a grammar/schema/regex constraint yet. "
                                  "Fix: mask_apply the constraint inside the program, or use a named sampler")
        self.sampler = self.options.for_sequence(model.tokenizer, model.config.vocab_size, watermark)
        if watermark is not None and not self.options.is_program:
            from ..inferlets.watermark import Watermark
            self.sampler = self.sampler.then(Watermark.of(watermark))
        self.seed = seed
        self.speculative = None  # a Speculation (textgen/speculation.py): the drafts and how many to verify
        if speculative is not None:
            from .speculation import Speculation
            self.speculative = Speculation.of(speculative, self)
        stop_ids, stop_strings = self._stops(stop)
        ids = model.tokenizer.encode(self.prompt).ids
        self.ws = working_set
        self._owns_ws = False  # a working set _stream makes itself (finish() gives its pages back)
        self.reuse_prefix = bool(reuse_prefix)
        self._sequence = ids  # with reuse_prefix: the whole sequence, of which prompt_ids is the unheld rest
        if working_set is not None and not reuse_prefix:
            if working_set.length:  # refused where it holds KV of another adapter
                working_set.run_under(self.lora)
            sess = model.session(working_set)
            sess.sync()
            if sess.pending is not None:  # the last token drawn on this working set is not embedded yet
                ids = [sess.pending] + ids
        if not ids:
            raise ValidationError("generate: the prompt is empty (no tokens). Fix: pass some text")
        self.prompt_ids = ids
        # With reuse_prefix the whole sequence must fit: it replaces what the working set holds.
        start = working_set.length if working_set is not None and not reuse_prefix else 0
        limit = working_set.max_tokens if working_set is not None else model.context
        if start + len(ids) > limit:
            raise ValidationError(f"generate: the prompt has {len(ids)} tokens but the context has room for "
                                  f"{limit - start}. Fix: a shorter prompt or a larger working set")
        self.out = TokenOutput(model.tokenizer, stop_ids, stop_strings, min(max_tokens, limit - start - len(ids) + 1),
                               on_token)
        self.stats = GenerationStats(prompt_tokens=len(ids),
                                     speculative=None if self.speculative is None else self.speculative.name)
        if self.grammar is not None:
            self.stats.grammar, self.stats.grammar_reason = self.grammar.mode, self.grammar.reason
        if reuse_prefix:
            self._plan_reuse(model.session(working_set))
        self._started = False

    # ---- the output (the token-level core: textgen/tokens.py) ------------------------------------
    tokens = property(lambda self: self.out.tokens, doc="The generated token ids (a stop token excluded).")
    text = property(lambda self: self.out.text, doc="The text so far (no stop string, nor what may begin one).")
    budget = property(lambda self: self.out.budget, doc="Tokens it may draw (max_tokens or the room left).")

    def accept(self, tok: int) -> tuple:
        """Take the next drawn token: (new text piece, whether to go on)."""
        return self.out.accept(tok)

    def start(self) -> None:
        """Mark this generation as running (once): a second run is a ValidationError."""
        if self._started:
            raise ValidationError("this Generation already ran. Fix: call model.generate(...) again")
        self._started = True

    def finish(self, reason: str = MAX_TOKENS) -> str:
        """It ended (for `reason` unless one is recorded): returns the held-back text and fills stats.stop_reason."""
        rest = self.out.finish(reason)
        self.stats.stop_reason = self.out.stop_reason
        self.stats.generated = len(self.tokens)
        pool = self.model.gpu.kv
        self.stats.kv_pages = len(self.ws.pages) if self.ws is not None else 0
        self.stats.kv_pages_used, self.stats.kv_pages_total = pool.pages_used, pool.pages_total - 1
        if self._owns_ws:  # nobody can continue on a working set the generation made itself: its KV pages go
            self.ws.release()  # back now, not when the cycle collector finds it and its session
        return rest

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

    def _plan_reuse(self, sess) -> int:
        """With reuse_prefix: how many tokens of the sequence the working set keeps; prompt_ids becomes the rest."""
        keep = sess.common_prefix(self._sequence) if sess.ws.runs_under(self.lora) else 0
        self.prompt_ids = self._sequence[keep:]
        self.stats.prompt_tokens = len(self.prompt_ids)
        self.stats.reused_tokens = keep
        return keep

    # ---- iteration -------------------------------------------------------------------------------
    def __iter__(self):
        """Text pieces as tokens arrive, from synchronous code anywhere: no loop, a running loop, any thread."""
        return iterate_sync(self.__aiter__())

    def __aiter__(self):
        return self._stream()

    def run(self) -> str:
        """Generate to the end and return the whole text (callable wherever __iter__ is)."""
        return run_sync(self.arun())

    async def arun(self) -> str:
        """Async run()."""
        async for _ in self._stream():
            pass
        return self.text

    def cancel(self) -> None:
        """Stop this generation at its next token; callable from any thread (a Stop button's handler).

        The token being drawn is still accepted (it arrives as the last piece) and the passes in
        flight are rewound, so a later generate() on the same working set continues from exactly
        the tokens this one produced. stats.stop_reason becomes "cancelled".
        """
        self.out.cancel()

    @property
    def cancelled(self) -> bool:
        """Whether cancel() was called."""
        return self.out.cancelled

    # ---- the work -------------------------------------------------------------------------------
    async def _stream(self):
        self.start()
        model = self.model
        if self.ws is None:
            need = min(model.context, len(self.prompt_ids) + self.max_tokens + 1)
            self.ws = model.working_set(need)
            self._owns_ws = True
        sess = model.session(self.ws)
        if self.reuse_prefix:  # planned again: the working set may have changed since __init__
            sess.truncate(self._plan_reuse(sess))
        self.ws.run_under(self.lora)
        pipe = sess.pipe
        t0 = time.perf_counter()
        await sess.extend(self.prompt_ids[:-1])
        if self.cancelled:  # cancelled before decoding: the prompt's last token stays pending
            sess.pending = self.prompt_ids[-1]
            self.finish("cancelled")
            self.stats.prefill_s = time.perf_counter() - t0
            return
        host_masks = self.grammar is not None and self.grammar.mode == "host"
        if self.grammar is not None and not host_masks:  # the automaton runs in the epilogue (grammar_run.py)
            from .grammar_run import device_pieces
            pieces = device_pieces(self, sess)
        elif host_masks:  # a depth-1 loop: the host writes each step's mask (inferlets/grammar.py)
            from ..inferlets.grammar_loop import constrained_pieces
            pieces = constrained_pieces(self, sess)
        else:
            sampling = sess.loop(("generate", self.sampler), lambda: self._sampling(sess))
            sampling.states.seed(SeqContext(tuple(sess.tokens + self.prompt_ids[-1:]), model.config.vocab_size,
                                            self.seed))
            if self.speculative is not None:  # drafts verified on the device, plain run-ahead between them
                from .speculation import speculative_pieces
                pieces = speculative_pieces(self, sess, sampling)
            else:
                pieces = self.run_ahead_pieces(sess, sampling, self.prompt_ids[-1])
        self.stats.prefill_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        async for piece in pieces:
            yield piece
        if host_masks:
            self.stats.host_waits = len(self.tokens)  # one readback per step
        rest = self.finish()
        if rest:
            yield rest
        self.stats.decode_s = time.perf_counter() - t1

    async def run_ahead_pieces(self, sess, sampling: _Sampling, first: int, until=None):
        """Text pieces of the decode loop run ahead from the pending token `first`, until the output ends or
        `until(token)` says to stop after a token (the passes in flight are rewound); then the last token taken
        is the session's pending one."""
        loop = sampling.loop
        loop.token_in.clear()
        loop.token_in.put([first])
        queue: asyncio.Queue = asyncio.Queue()
        taken: list = []

        async def on_token():
            waited = not loop.token_out.ready()  # (a group's later passes are read without a wait)
            tok = await loop.token_out.take_scalar()
            # Record the token at once: an interrupt after this line must not lose it.
            taken.append(tok)
            self.stats.host_waits += waited
            sess.pending = tok
            piece, more = self.accept(tok)
            if piece:
                queue.put_nowait(piece)
            return more and not (until is not None and until(tok))

        task = asyncio.ensure_future(sess.pipe.run_ahead(loop.fwd, self.budget - len(self.tokens), on_token,
                                                         window=self.window))
        get = None
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
            # an interrupt (Ctrl-C, cancel) may land while both are awaited: neither may outlive this
            # generator (a pending task when the loop closes is "destroyed but pending")
            for t in (task, get):
                if t is not None and not t.done():
                    t.cancel()
                    try:
                        await t
                    except (asyncio.CancelledError, Exception):
                        pass
            if taken:  # the last token taken is pending, not embedded
                sess.embedded([first] + taken[:-1])
            else:  # stopped before the first token: the first token is still pending
                sess.pending = first

    @property
    def finish_reason(self) -> str:
        """OpenAI's finish reason: "length" when max_tokens (or the context) ended it, else "stop"."""
        return "length" if self.stats.stop_reason == "max_tokens" else "stop"

    def _sampling(self, sess) -> _Sampling:
        if isinstance(self.sampler, ProgramSampler):
            states = ProgramStates(self.sampler)
            return _Sampling(decode_loop(sess.ws, states.step), states)
        states = SamplerStates(self.sampler, self.model.config.vocab_size)
        return _Sampling(decode_loop(sess.ws, states.step), states)
