"""Several generations at once: model.generate_batch(prompts) and model.generate(prompt, n=N).

Both run on a runtime Batch (continuous batching): every sequence is a row of the same
decode pass, sampled on the device by one epilogue with per-row parameters. n samples
of one prompt prefill it once and fork the working set (ws.fork()) for each sample.
Each row draws from its own [seed, draws] RNG state, so a row's tokens equal those of
the same prompt generated alone with the same seed. A grammar (grammar=, regex=, json_schema=,
json_object=) gives each row its own llguidance matcher, whose mask the row sampler applies
on the device; unlike generate() alone, tokens the grammar forces are drawn (from a mask
allowing only them) rather than prefilled, and there is no budget completion near max_tokens:
greedy rows equal their runs alone, seeded rows may differ after a forced token.
"""

from __future__ import annotations

import time

from ..errors import ValidationError
from .generation import Generation
from ..runtime.batch import Batch
from ..runtime.session import run_sync
from ..samplers.rows import RowParams, RowSampling, RowState


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValidationError(f"generate: n must be an int >= 1, got {n!r}. Fix: n=4 draws four samples")
    return n


def _batch(model, max_batch: int) -> Batch:
    return Batch(model, RowSampling(model.config.vocab_size), max_batch=max_batch)


def _join(batch: Batch, g: Generation, session=None, logprobs: bool = False) -> None:
    """Add generation g to the batch; its tokens and text arrive through g.accept."""
    constraint = getattr(g, "constraint", None)  # grammar=/regex=/json_schema=...: a mask per row
    params = RowParams.of(g.sampler, g.seed, logprobs, constrained=constraint is not None)
    g._done = True  # it runs here, not through its own stream
    g.stats.stop_reason = ""

    def on_token(seq, tok):
        _, more = g.accept(tok)
        return more
    state = RowState(params, g.model.config.vocab_size, g.prompt_ids,  # penalties count the prompt, as generate() does
                     constraint.matcher() if constraint is not None else None)
    g._seq = batch.add(g.prompt_ids, params, g.budget, g.stop_ids, on_token, session=session, row_state=state)


def _finish(batch: Batch, gens: list, t0: float, prefill_s: float = 0.0) -> list:
    for g in gens:
        s = g._seq
        g.stats.generated = len(g.tokens)
        g.stats.decode_s = time.perf_counter() - t0
        g.stats.prefill_s = prefill_s
        if not g.stats.stop_reason:
            g.stats.stop_reason = {"stop": "stop token", "cancelled": "cancelled"}.get(s.finish_reason, "max_tokens")
    return gens


async def agenerate_batch(model, prompts, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                          seed: int = 0, stop=None, chat: bool = False, max_batch: int = 16, **options) -> list:
    """Async generate_batch()."""
    if isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts):
        raise ValidationError("generate_batch: prompts must be a list of str. Fix: generate_batch(['a', 'b'])")
    gens = []
    for i, p in enumerate(prompts):
        try:
            gens.append(Generation(model, p, max_tokens=max_tokens, sampler=sampler, temperature=temperature,
                                   seed=seed, stop=stop, chat=chat, **options))
        except ValidationError as e:
            raise ValidationError(f"generate_batch: prompt {i}: {e}") from None
    batch = _batch(model, max_batch)
    for g in gens:
        _join(batch, g)
    t0 = time.perf_counter()
    await batch.run()
    return _finish(batch, gens, t0)


def generate_batch(model, prompts, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0, seed: int = 0,
                   stop=None, chat: bool = False, max_batch: int = 16, **options) -> list:
    """One finished Generation per prompt (.text, .tokens, .stats), all decoded together in batched passes."""
    return run_sync(agenerate_batch(model, prompts, max_tokens, sampler, temperature, seed, stop, chat, max_batch,
                                    **options))


class Samples:
    """n samples of one prompt (model.generate(prompt, n=N)): .run(), then .texts and .samples."""

    def __init__(self, model, prompt: str, n: int, seed: int = 0, logprobs: bool = False, **kwargs):
        self.n = _check_n(n)
        self.logprobs = logprobs  # then each sample's .logprobs: the model's log-probability of each token
        # sample i is the prompt generated alone with seed + i
        self.samples = [Generation(model, prompt, seed=(seed + i) & 0xFFFFFFFF, **kwargs) for i in range(n)]
        self.model = model
        self._ran = False

    @property
    def texts(self) -> list:
        """The text of every sample (runs the generation first if needed)."""
        if not self._ran:
            self.run()
        return [g.text for g in self.samples]

    def run(self) -> list:
        """Generate every sample; returns their texts."""
        run_sync(self.arun())
        return [g.text for g in self.samples]

    async def arun(self) -> list:
        """Async run(): the prompt is prefilled once, then each sample decodes on its own fork."""
        if self._ran:
            raise ValidationError("these samples were already generated. Fix: call model.generate(...) again")
        self._ran = True
        first = self.samples[0]
        ids = first.prompt_ids
        t0 = time.perf_counter()
        base = self.model.session(self.model.working_set(min(self.model.config.max_position_embeddings,
                                                              len(ids) + first.max_tokens + 1)))
        await base.extend(ids[:-1])
        sessions = [base] + [base.fork() for _ in range(self.n - 1)]
        prefill_s = time.perf_counter() - t0
        batch = _batch(self.model, self.n)
        for g, sess in zip(self.samples, sessions):
            _join(batch, g, session=sess, logprobs=self.logprobs)
        t1 = time.perf_counter()
        await batch.run()
        _finish(batch, self.samples, t1, prefill_s)
        for g in self.samples:
            g.logprobs = g._seq.logprobs[:len(g.tokens)]
        return [g.text for g in self.samples]
