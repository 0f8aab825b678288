"""generate(speculative=...): n-gram lookup drafts verified on the device, plain run-ahead decoding between them.

Each step the host looks the sequence's last n-gram up (inferlets/speculative.py NgramIndex: the prompt and every
token generated so far) and decides how many of the tokens that followed it to verify (Lookup.adaptive): a verify
pass over d drafts emits E(d) = 1 + a + ... + a^d tokens on average (a: the measured acceptance rate of drafts
found by n-grams of that length) and costs what its passes measured, against one token a plain pass. Where drafting
does not pay -- free text, few or wrong matches -- the generation runs the plain decode loop ahead on the device
(run_ahead, its window of passes in flight) and looks up drafts after each token, interrupting the run (the passes
in flight are rewound) only where a verify pass is expected to gain more than those passes cost. Draft sizes are
1, 3, 7, 15 ... up to k (each size compiles one pass).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import ValidationError
from ..inferlets.speculative import NgramIndex, verify_pass

NAMES = ("lookup",)  # draft sources a string names


@dataclass(frozen=True)
class Lookup:
    """Prompt-lookup drafting (llama.cpp's lookup decoding, vLLM's n-gram speculation).

    k: the most drafts a verify pass takes; ngram / ngram_min: the longest and shortest n-gram matched (the
    longest match wins); adaptive: pick the draft length from the measured acceptance and pass costs, and decode
    plainly where drafts do not pay (False: verify every step whatever the lookup finds, as many as it finds);
    drafter(tokens, k) -> token ids, if given, proposes the drafts instead of the lookup.
    """

    k: int = 7
    ngram: int = 3
    ngram_min: int = 1
    adaptive: bool = True
    drafter: object = None

    def __post_init__(self):
        for name, lo in (("k", 1), ("ngram", 1), ("ngram_min", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValidationError(f"Lookup({name}={v!r}): {name} must be an int >= {lo}")
        if self.ngram_min > self.ngram:
            raise ValidationError(f"Lookup(ngram={self.ngram}, ngram_min={self.ngram_min}): ngram_min must be <= "
                                  "ngram. Fix: Lookup(ngram=3, ngram_min=1)")
        if self.drafter is not None and not callable(self.drafter):
            raise ValidationError(f"Lookup(drafter={self.drafter!r}): drafter must be callable "
                                  "(tokens, k) -> token ids")

    name = "lookup"


def _composes(gen) -> None:
    """Refuse what speculative verification cannot compose with (ValidationError naming it and the fix)."""
    from ..samplers.llamacpp import LogitBias
    from ..samplers.state import RNG_STATE
    fix = " Fix: drop speculative=, or drop that option"
    if gen.constraint is not None:
        raise ValidationError("generate(speculative=...) cannot take a grammar/schema/regex constraint yet: its "
                              "mask depends on every drafted token." + fix)
    if gen.options.is_program:
        raise ValidationError("generate(speculative=...) cannot run a sampler program (its distribution is not "
                              "known to the verifier)." + fix)
    s = gen.sampler
    bad = [p.name for p in s.processors if not isinstance(p, LogitBias)]
    bad += [st.name for st in s.states(gen.model.config.vocab_size) if st.name not in (RNG_STATE, "logit_bias")]
    if bad:
        raise ValidationError(f"generate(speculative=...): the sampler stages {sorted(set(bad))} carry state that "
                              f"depends on every drawn token (penalties, DRY, Mirostat, a watermark), which a pass "
                              f"over drafts cannot update row by row. Speculative decoding composes with temperature, "
                              f"the truncations (top-k, top-p, min-p, typical, top-a, epsilon/eta, XTC, top-n-sigma, "
                              f"tail-free, dynamic temperature) and logit_bias." + fix)


def _sizes(k: int) -> tuple:
    """The draft lengths a verify pass takes: 1, 3, 7, ... below k, and k."""
    out, d = [], 1
    while d < k:
        out.append(d)
        d = 2 * d + 1
    return tuple(out) + (k,)


class Speculation:
    """One generation's drafting: the n-gram index, the acceptance and cost estimates, the choice of d."""

    PLAIN_PRIOR = 1.0  # cost of a plain token before any is measured (relative units; only ratios matter)
    VERIFY_PRIOR = 0.25  # a verify pass of d drafts: PLAIN (1 + VERIFY_PRIOR d) until measured
    DECAY = 0.9  # weight of the past in the acceptance counts and the cost averages

    def __init__(self, lookup: Lookup, gen):
        self.lookup, self.gen = lookup, gen
        self.name = lookup.name
        self.index = NgramIndex(lookup.ngram, lookup.ngram_min)
        self.sizes = _sizes(lookup.k)
        self.hits = {n: [1.0, 1.0] for n in range(1, lookup.ngram + 1)}  # n -> [accepted, rejected] (decayed)
        self.t_plain: float | None = None
        self.t_verify: dict = {}
        self.seen: set = set()  # draft lengths whose pass ran once
        self.window = 1  # passes in flight that an interrupted run-ahead throws away (set by the driver)

    @staticmethod
    def of(spec, gen) -> "Speculation":
        """The Speculation for generate(speculative=spec) (ValidationError for what cannot run)."""
        if isinstance(spec, str):
            if spec not in NAMES:
                raise ValidationError(f"generate(speculative={spec!r}): the draft sources are {list(NAMES)} "
                                      "(or piegpu.Lookup(k=..., ngram=...)). Draft models and self-drafts are not "
                                      "built yet. Fix: speculative='lookup'")
            spec = Lookup()
        if not isinstance(spec, Lookup):
            raise ValidationError(f"generate(speculative={spec!r:.60}): pass 'lookup' or piegpu.Lookup(...)")
        _composes(gen)
        return Speculation(spec, gen)

    # ---- drafts --------------------------------------------------------------------------------
    def drafts(self, room: int) -> tuple:
        """(up to `room` draft tokens, the n-gram length that found them; 0 for a drafter's)."""
        if room < 1:
            return [], 0
        if self.lookup.drafter is not None:
            d = [int(t) for t in self.lookup.drafter(list(self.index.tokens), room)][:room]
            V = self.gen.model.config.vocab_size
            if any(not 0 <= t < V for t in d):
                raise ValidationError(f"generate(speculative=...): the drafter proposed token ids outside [0, {V}): "
                                      f"{d}")
            return d, 0
        return self.index.drafts(room)

    # ---- the choice ----------------------------------------------------------------------------
    def acceptance(self, n: int) -> float:
        """The estimated chance that a draft found by an n-gram stands (given the ones before it stood)."""
        a, r = self.hits.get(n, (1.0, 1.0))
        return a / (a + r)

    def cost(self, d: int) -> float:
        """Measured (else estimated) seconds of a verify pass over d drafts."""
        base = self.t_plain if self.t_plain is not None else self.PLAIN_PRIOR
        if d in self.t_verify:
            return self.t_verify[d]
        known = sorted(self.t_verify)
        if known:  # scale the nearest measured size
            near = min(known, key=lambda s: abs(s - d))
            return self.t_verify[near] * (1 + self.VERIFY_PRIOR * d) / (1 + self.VERIFY_PRIOR * near)
        return base * (1 + self.VERIFY_PRIOR * d)

    def pick(self, m: int, n: int, interrupting: bool = False) -> int | None:
        """How many of m drafts to verify, or None to decode plainly; `interrupting`: a run-ahead would be cut."""
        if not self.lookup.adaptive:
            return m
        if m < 1:
            return None
        a = self.acceptance(n) if n else 0.5
        plain = self.t_plain if self.t_plain is not None else self.PLAIN_PRIOR
        waste = (self.window - 1) * plain if interrupting else 0.0
        best, gain = None, 1.0 / plain  # tokens a second of plain decoding
        for d in self.sizes:
            if d > m:
                break
            expected = (1 - a ** (d + 1)) / (1 - a) if a < 1 else d + 1.0
            rate = expected / (self.cost(d) + waste)
            if rate > gain:
                best, gain = d, rate
        return best

    # ---- what was measured ---------------------------------------------------------------------
    def observe(self, n: int, accepted: int, drafted: int) -> None:
        """A verify pass over `drafted` drafts found by an n-gram accepted `accepted` of them."""
        if n in self.hits:
            h = self.hits[n]
            h[0] = self.DECAY * h[0] + accepted
            h[1] = self.DECAY * h[1] + (1 if accepted < drafted else 0)

    def timed_verify(self, d: int, seconds: float) -> None:
        """A verify pass over d drafts took `seconds` (submit to verdict); the first of each d is not counted (it
        prepares the pass: traces, compiles or looks its kernels up)."""
        if d not in self.seen:
            self.seen.add(d)
            return
        old = self.t_verify.get(d)
        self.t_verify[d] = seconds if old is None else self.DECAY * old + (1 - self.DECAY) * seconds

    def timed_plain(self, tokens: int, seconds: float) -> None:
        """A run-ahead segment decoded `tokens` in `seconds`."""
        if tokens > 0:
            per = seconds / tokens
            w = self.DECAY ** tokens
            self.t_plain = per if self.t_plain is None else w * self.t_plain + (1 - w) * per


async def speculative_pieces(gen, sess, sampling):
    """The text pieces of generation `gen` on session `sess`, decoded with its Speculation (see the module)."""
    spec: Speculation = gen.speculative
    ws, stats = sess.ws, gen.stats
    spec.window = gen.window or sess.pipe.window
    spec.index.extend(sess.tokens)
    pending = gen.prompt_ids[-1]
    spec.index.extend([pending])

    def room() -> int:  # drafts that fit the budget and the working set (the pending token is embedded too)
        return min(spec.lookup.k, gen.budget - len(gen.tokens) - 1, ws.max_tokens - ws.length - 1)

    def until(tok: int) -> bool:  # after each plain token: is a verify pass worth cutting the run for?
        spec.index.extend([tok])
        drafts, n = spec.drafts(room())
        return bool(drafts) and spec.pick(len(drafts), n, interrupting=True) is not None

    while True:
        drafts, n = spec.drafts(room())
        d = spec.pick(len(drafts), n)
        if d is None:  # decode plainly, run ahead, until a draft is worth verifying
            t, before = time.perf_counter(), len(gen.tokens)
            async for piece in gen.run_ahead_pieces(sess, sampling, pending, until):
                yield piece
            ran = len(gen.tokens) - before + (gen.out.stop_reason == "stop token")
            stats.plain_passes += ran
            spec.timed_plain(ran, time.perf_counter() - t)
            if gen.out.stop_reason or sess.pending is None:
                return
            pending = sess.pending
            continue
        drafts = drafts[:d]
        v = verify_pass(sess, d, gen.sampler, sampling.states)
        v.tokens.clear()
        v.result.clear()
        v.tokens.put([pending] + drafts)
        before = ws.length
        t = time.perf_counter()
        await sess.pipe.submit(v.fwd)
        r = (await v.result.take()).tolist()
        spec.timed_verify(d, time.perf_counter() - t)
        acc = int(r[0])
        new = drafts[:acc] + [int(r[1 + acc])]
        ws.note_length(before + acc + 1)
        sess.embedded([pending] + drafts[:acc])
        spec.observe(n, acc, d)
        stats.verify_passes += 1
        stats.draft_tokens += d
        stats.accepted_tokens += acc
        stats.host_waits += 1
        pieces, ended = [], None
        for i, tok in enumerate(new):  # every token through the output before any piece leaves
            piece, more = gen.accept(tok)
            if piece:
                pieces.append(piece)
            if not more:
                ended = i
                break
        if ended is not None:
            if ended < acc:  # the KV holds drafts past the last token taken: they go
                sess.truncate(before + 1 + ended)
            sess.pending = new[ended]
        else:
            spec.index.extend(new)
            pending = sess.pending = new[-1]
        for piece in pieces:
            yield piece
        if ended is not None:
            return


@dataclass
class SpeculativeStats:
    """Draft and acceptance counts of one speculative generation (generate_speculative's view of its stats)."""

    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    decode_s: float = 0.0
    stop_reason: str = ""

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts over proposed drafts."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Generated tokens per pass (1.0 is plain decoding)."""
        return self.generated / self.passes if self.passes else 0.0


def generate_speculative(model, prompt: str, max_tokens: int = 128, k: int = 4, ngram: int = 3,
                         chat: bool = False, drafter=None) -> tuple:
    """(tokens, SpeculativeStats): greedy decoding of `prompt` with up to k lookup drafts verified per pass.

    Every step verifies what the drafter proposes (no adaptive back-off): model.generate(prompt,
    speculative=piegpu.Lookup(k=k, ngram=ngram, adaptive=False, drafter=drafter)).
    `drafter(sequence, k) -> token ids` replaces prompt lookup (e.g. a small draft model).
    """
    for name, v, lo in (("max_tokens", max_tokens, 1), ("k", k, 1), ("ngram", ngram, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValidationError(f"generate_speculative: {name} must be an int >= {lo}, got {v!r}")
    g = model.generate(prompt, max_tokens=max_tokens, chat=chat,
                       speculative=Lookup(k=k, ngram=ngram, adaptive=False, drafter=drafter))
    g.run()
    s = g.stats
    return list(g.tokens), SpeculativeStats(s.verify_passes + s.plain_passes, s.draft_tokens, s.accepted_tokens,
                                            s.generated, s.decode_s, s.stop_reason)


__all__ = ["Lookup", "Speculation", "speculative_pieces", "generate_speculative", "SpeculativeStats"]
