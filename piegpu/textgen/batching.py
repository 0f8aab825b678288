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
from ..runtime.window import check_window
from ..runtime.session import run_sync
from ..samplers.rows import RowParams, RowSampling
from .tokens import admit, finish_reason


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValidationError(f"generate: n must be an int >= 1, got {n!r}. Fix: n=4 draws four samples")
    return n


def _batch(model, max_batch: int, window: int | None) -> Batch:
    return Batch(model, RowSampling(model.config.vocab_size), max_batch=max_batch, window=window)


def _join(batch: Batch, g: Generation, session=None, logprobs: bool = False):
    """Admit generation g to the batch (its tokens and text arrive through g.out); returns its runtime Sequence."""
    g.start()  # it runs here, not through its own stream
    device = g.grammar is not None and g.grammar.mode == "device"  # the row's automaton runs in the epilogue
    # else a grammar mask per row from the host
    constraint = g.constraint.matcher() if g.constraint is not None and not device else None
    if g.options.is_program:
        params = g.options.row_params(g.seed, logprobs, constrained=constraint is not None)
    else:  # g.sampler: the options' sampler with what generate() adds (a watermark: refused, never dropped)
        params = RowParams.of(g.sampler, g.seed, logprobs, constrained=constraint is not None)
    automaton = g.grammar.automaton if device else None
    if device:
        from ..inferlets.device_grammar import on_rows
        params = on_rows(params, automaton)
    # penalties count the prompt, as generate() does
    return admit(batch, g.out, g.prompt_ids, params, session=session, constraint=constraint, adapter=g.lora,
                 automaton=automaton)


def _finish(seqs: list, gens: list, t0: float, prefill_s: float = 0.0) -> list:
    for g, s in zip(gens, seqs):
        g.finish(finish_reason(s))
        g.stats.kv_pages = len(s.session.ws.pages)
        g.stats.host_waits = s.host_waits
        g.stats.decode_s = time.perf_counter() - t0
        g.stats.prefill_s = prefill_s
    for s in seqs:  # the working sets made here: nobody continues on them, their KV pages go back now
        s.session.ws.release()
    return gens


SHARED_LISTS = ("dry_sequence_breakers", "samplers")  # list-valued options (lists of lists too): never per prompt


def _of_prompt(key: str, value, i: int, n: int):
    """Prompt i's value of a generate_batch option: a list holds one value per prompt (None: not set for that prompt;
    for stop=, a list of lists: a flat list of strings is every prompt's stop strings; dry_sequence_breakers= and
    samplers= are lists themselves, always shared)."""
    per = isinstance(value, list) and key not in SHARED_LISTS and (
        key != "stop" or (value and all(isinstance(v, (list, type(None))) for v in value)))
    if not per:
        return value
    if len(value) != n:
        raise ValidationError(f"generate_batch: {key}= is a list of {len(value)} values for {n} prompts. Fix: one "
                              "value per prompt (None where a prompt has none), or a single value for all")
    return value[i]


async def agenerate_batch(model, prompts, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0,
                          seed: int = 0, stop=None, chat: bool = False, max_batch: int = 16,
                          window: int | None = None, adapters: list | None = None, **options) -> list:
    """Async generate_batch()."""
    if isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts):
        raise ValidationError("generate_batch: prompts must be a list of str. Fix: generate_batch(['a', 'b'])")
    if options.get("speculative") is not None:
        raise ValidationError("generate_batch(speculative=...): batched speculative decoding is not built yet "
                              "(docs/speculative.md). Fix: model.generate(prompt, speculative=...) per prompt")
    gens = []
    shared = dict(options, max_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop)
    for i, p in enumerate(prompts):
        try:
            # None: not set for this prompt (Generation's default)
            mine = {k: _of_prompt(k, v, i, len(prompts)) for k, v in shared.items()}
            mine = {k: v for k, v in mine.items() if v is not None}
            gens.append(Generation(model, p, sampler=sampler, chat=chat,
                                   adapter=None if adapters is None else adapters[i], **mine))
        except ValidationError as e:
            raise ValidationError(f"generate_batch: prompt {i}: {e}") from None
    t0 = time.perf_counter()
    sessions = await _shared_prefix(model, gens)
    prefill_s = time.perf_counter() - t0 if sessions[0] is not None else 0.0
    batch = _batch(model, max_batch, window)
    seqs = [_join(batch, g, session=sess) for g, sess in zip(gens, sessions)]
    t0 = time.perf_counter()
    await batch.run()
    _finish(seqs, gens, t0, prefill_s)
    failed = [(i, s.error) for i, s in enumerate(seqs) if s.error]
    if failed:
        e = ValidationError("generate_batch: " + "; ".join(f"prompt {i}: {why}" for i, why in failed) +
                            " (the other prompts finished: their Generations are the error's .generations)")
        e.generations = gens
        raise e
    return gens


async def _shared_prefix(model, gens: list) -> list:
    """Sessions holding the prompts' common prefix (at least one KV page of it), prefilled once and shared by
    forks (their pages are reference-counted, not copied); [None, ...] when the prompts share less."""
    ids = [g.prompt_ids[:-1] for g in gens]  # each prompt's last token is embedded by its first decode pass
    n = min((len(i) for i in ids), default=0)
    common = next((k for k in range(n) if any(i[k] != ids[0][k] for i in ids[1:])), n)
    if len(gens) < 2 or common < model.gpu.kv.page or len({g.lora for g in gens}) > 1:
        return [None] * len(gens)  # (a prefix computed under one adapter is no prefix under another)
    for g in gens[1:]:
        g.stats.reused_tokens = common  # the first prompt's prefill of the common prefix, shared
    room = max(len(g.prompt_ids) + g.budget for g in gens)  # pages are taken as used, so room costs nothing
    base = model.session(model.working_set(min(model.context, room)))
    base.ws.run_under(gens[0].lora)
    await base.extend(ids[0][:common])
    return [base] + [base.fork() for _ in gens[1:]]


def generate_batch(model, prompts, max_tokens: int = 128, sampler="greedy", temperature: float = 1.0, seed: int = 0,
                   stop=None, chat: bool = False, max_batch: int = 16, window: int | None = None,
                   adapters: list | None = None, **options) -> list:
    """One finished Generation per prompt (.text, .tokens, .stats), all decoded together in batched passes.

    `window`: passes run ahead per host read (see runtime/batch.py); None = the adapter's best.
    """
    return run_sync(agenerate_batch(model, prompts, max_tokens, sampler, temperature, seed, stop, chat, max_batch,
                                    window, adapters, **options))


class Samples:
    """n samples of one prompt (model.generate(prompt, n=N)): .run(), then .texts and .samples."""

    def __init__(self, model, prompt: str, n: int, seed: int = 0, logprobs: bool = False,
                 window: int | None = None, **kwargs):
        self.n = _check_n(n)
        self.window = None if window is None else check_window(window, "generate(n=...)")
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
        base = self.model.session(self.model.working_set(min(self.model.context,
                                                              len(ids) + first.max_tokens + 1)))
        base.ws.run_under(first.lora)
        await base.extend(ids[:-1])
        sessions = [base] + [base.fork() for _ in range(self.n - 1)]
        prefill_s = time.perf_counter() - t0
        batch = _batch(self.model, self.n, self.window)
        seqs = [_join(batch, g, session=sess, logprobs=self.logprobs) for g, sess in zip(self.samples, sessions)]
        t1 = time.perf_counter()
        await batch.run()
        _finish(seqs, self.samples, t1, prefill_s)
        for g, s in zip(self.samples, seqs):
            g.logprobs = s.logprobs[:len(g.tokens)]
        return [g.text for g in self.samples]
