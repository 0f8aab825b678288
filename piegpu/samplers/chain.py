"""The Sampler chain, and the device channels that carry its states between passes."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from .penalties import Penalties
from .state import RNG_STATE, Processor, SeqContext, StateSpec, Truncation, check_temperature
from .truncations import Mirostat

F32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Sampler:
    """A sampler chain: processors -> temperature -> truncations -> Gumbel-max (argmax at temperature 0).

    Off stages (TopK(0), TopP(1), MinP(0), Typical(1), Penalties(1, 0, 0), ...) are dropped:
    they keep every token, so the chain equals (and compiles like) the chain without them.
    Temperature 1 scales nothing and temperature 0 is greedy. A DynamicTemperature stage
    carries the temperature: the sampler takes it (a sampler temperature other than 1 must
    agree), and with delta 0 the stage is plain temperature and is dropped.
    """

    temperature: float = 1.0
    truncations: tuple = ()
    processors: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        object.__setattr__(self, "truncations", tuple(self.truncations))
        object.__setattr__(self, "processors", tuple(self.processors))
        for t in self.truncations:
            if not isinstance(t, Truncation):
                raise ValidationError(f"Sampler: {t!r} is not a Truncation stage (TopK, TopP, Typical, Mirostat...)")
        for p in self.processors:
            if not isinstance(p, Processor):
                raise ValidationError(f"Sampler: {p!r} is not a Processor stage (Penalties, Watermark...)")
        self._take_dynamic_temperature()
        object.__setattr__(self, "truncations", tuple(t for t in self.truncations if not t.off))
        object.__setattr__(self, "processors", tuple(p for p in self.processors if not p.off))
        mirostats = [i for i, t in enumerate(self.truncations) if isinstance(t, Mirostat)]
        if mirostats and mirostats != [len(self.truncations) - 1]:
            raise ValidationError("Sampler: Mirostat must be the last truncation (it adapts to what is drawn). "
                                  "Fix: put it after top-k/top-p/... or use it alone")
        names = [s.name for s in self.states(2)]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValidationError(f"Sampler: two stages carry state named {sorted(dup)}. Fix: use one stage of each kind")

    def _take_dynamic_temperature(self) -> None:
        from .llamacpp import DynamicTemperature
        dyn = [t for t in self.truncations if isinstance(t, DynamicTemperature)]
        if len(dyn) > 1:
            raise ValidationError("Sampler: more than one DynamicTemperature stage. Fix: use one")
        if dyn:
            t = dyn[0].temperature
            if self.temperature not in (1.0, t):
                raise ValidationError(f"Sampler: temperature {self.temperature} and DynamicTemperature("
                                      f"temperature={t}) disagree. Fix: give the temperature once, in the stage")
            object.__setattr__(self, "temperature", t)

    # ---- description -------------------------------------------------------------------------
    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax of the processed logits (truncations do not matter)."""
        return self.temperature == 0.0

    @property
    def needs_rng(self) -> bool:
        """Whether the sampler draws random numbers (greedy does not)."""
        return not self.greedy

    @property
    def name(self) -> str:
        """greedy, temperature, the truncation's name, or the names joined by '+'."""
        if self.greedy:
            return "greedy"
        if not self.truncations:
            return "temperature"
        return "+".join(t.name for t in self.truncations)

    @property
    def param(self) -> float:
        """The parameter of a single-truncation sampler (k, p, a, mass, ...); 0 otherwise."""
        if len(self.truncations) != 1:
            return 0.0
        t = self.truncations[0]
        return float(next(getattr(t, f) for f in ("k", "p", "a", "mass", "epsilon", "tau", "eta", "n", "z",
                                                  "probability", "delta", "on") if hasattr(t, f)))

    def then(self, *stages) -> "Sampler":
        """This sampler with more stages: Processors join the processors, Truncations the truncations."""
        procs, truncs = list(self.processors), list(self.truncations)
        for s in stages:
            if isinstance(s, Processor):
                procs.append(s)
            elif isinstance(s, Truncation):
                truncs.append(s)
            else:
                raise ValidationError(f"Sampler.then: {s!r} is not a sampler stage")
        truncs.sort(key=lambda t: isinstance(t, Mirostat))  # Mirostat stays last
        return replace(self, processors=tuple(procs), truncations=tuple(truncs))

    def for_tokenizer(self, tokenizer) -> "Sampler":
        """This sampler with the stages that need the vocabulary (DRY's string sequence breakers) resolved."""
        from .dry import DRY
        if not any(isinstance(p, DRY) and p.needs_tokenizer for p in self.processors):
            return self
        procs = tuple(p.resolve(tokenizer) if isinstance(p, DRY) else p for p in self.processors)
        return replace(self, processors=procs)

    def with_penalties(self, repetition: float = 1.0, presence: float = 0.0, frequency: float = 0.0) -> "Sampler":
        """This sampler with repetition/presence/frequency penalties (a no-op stage is not added).

        The penalties come first among the processors, after a LogitBias (llama.cpp's order).
        """
        from .llamacpp import LogitBias
        p = Penalties(repetition, presence, frequency)
        rest = tuple(s for s in self.processors if not isinstance(s, Penalties))
        bias = tuple(s for s in rest if isinstance(s, LogitBias))
        rest = tuple(s for s in rest if not isinstance(s, LogitBias))
        return replace(self, processors=bias + ((p,) if p.active else ()) + rest)

    def with_dry(self, dry) -> "Sampler":
        """This sampler with a DRY stage (replacing any), after the logit bias and penalties (llama.cpp's order)."""
        from .dry import DRY
        from .llamacpp import LogitBias
        rest = tuple(s for s in self.processors if not isinstance(s, DRY))
        head = tuple(s for s in rest if isinstance(s, (LogitBias, Penalties)))
        rest = tuple(s for s in rest if not isinstance(s, (LogitBias, Penalties)))
        return replace(self, processors=head + ((dry,) if not dry.off else ()) + rest)

    @property
    def trace_key(self) -> tuple:
        """What shapes the traced program: equal keys trace equal programs (LogitBias values are device data).

        A decode loop cached under this key serves any sampler with the same key once its
        states are seeded from that sampler (SamplerStates.seed(ctx, sampler=...)).
        """
        return (self.temperature, tuple(t.trace_key() for t in self.truncations),
                tuple(p.trace_key() for p in self.processors))

    def _stages(self) -> tuple:
        return self.processors + (() if self.greedy else self.truncations)

    def states(self, vocab: int) -> tuple:
        """Every StateSpec the chain carries on the device (the RNG state [key, counter] last)."""
        specs = [s for st in self._stages() for s in st.states(vocab)]
        if self.needs_rng:
            specs.append(StateSpec(RNG_STATE, (2,), dtype.u32))
        return tuple(specs)

    def initial(self, ctx: SeqContext) -> dict:
        """Initial numpy values of every state for a decode run over ctx."""
        out = {}
        for st in self._stages():
            out.update(st.initial(ctx))
        if self.needs_rng:
            out[RNG_STATE] = np.array([ctx.seed & 0xFFFFFFFF, ctx.draws & 0xFFFFFFFF], np.uint32)
        return out

    # ---- traced ------------------------------------------------------------------------------
    def logits(self, logits, states: dict, allowed=None):
        """Traced: the final logits the draw uses (after the mask, processors, temperature, truncations)."""
        x = eta.sanitize(logits)
        if allowed is not None:
            x = eta.mask_apply(x, allowed)
        for p in self.processors:
            x = p.apply(x, states)
        if self.greedy:
            return x
        if self.temperature != 1.0:
            x = x * (1.0 / self.temperature)
        # +inf (or a logit that overflows when scaled) would make every softmax NaN: the
        # largest finite value keeps such a token dominant and the truncations well defined
        x = eta.minimum(x, F32_MAX)
        for t in self.truncations:
            x = t.transform(x, states)
        return x

    def step(self, logits, states: dict | None = None, allowed=None):
        """Traced: (token i32 over the leading axes, next states) for logits [..., vocab].

        `states` maps each StateSpec name to its current value; `allowed` is an optional
        bool mask (a grammar) applied before everything else.
        """
        states = dict(states or {})
        missing = [s.name for s in self.states(2) if s.name not in states]
        if missing:
            raise ValidationError(f"Sampler.step: missing device states {missing}. Fix: pass every state of "
                                  "sampler.states(vocab) (SamplerStates.take() does)")
        x = self.logits(logits, states, allowed)
        if self.greedy:
            token = eta.reduce_argmax(x)
        else:
            token = eta.gumbel_max(x, states[RNG_STATE])
        new = {}
        for st in self._stages():
            new.update(st.update(states, token, x))
        if self.needs_rng:
            new[RNG_STATE] = rng_advance(states[RNG_STATE])
        return token, new

    def keep_mask(self, x, states: dict | None = None):
        """Traced: the combined keep mask of the truncations on scaled logits x (None without truncations)."""
        keep = None
        for t in self.truncations:
            k = t.keep(x, states or {})
            keep = k if keep is None else eta.and_(keep, k)
            x = t.transform(x, states or {})
        return keep

    def sample(self, logits, state):
        """Traced: the sampled token id for a sampler whose only state is the RNG state (None when greedy)."""
        extra = [s.name for s in self.states(2) if s.name != RNG_STATE]
        if extra:
            raise ValidationError(f"Sampler.sample: this sampler carries device state {extra}. "
                                  "Fix: use sampler.step(logits, states) with SamplerStates")
        token, _ = self.step(logits, {RNG_STATE: state} if self.needs_rng else {})
        return token


class SamplerStates:
    """The device channels holding a sampler's states for one decode loop (created once, seeded per run)."""

    def __init__(self, sampler: Sampler, vocab: int, label: str = "sampler"):
        from ..runtime.channel import Channel
        self.sampler = sampler
        self.vocab = vocab
        self.specs = sampler.states(vocab)
        self.channels = {s.name: Channel(s.shape, s.dtype).named(f"{label}:{s.name}") for s in self.specs}

    def seed(self, ctx: SeqContext, sampler: Sampler | None = None) -> None:
        """Host: drop whatever the channels hold and put each state's initial value (no pass in flight).

        `sampler` (default: the one these channels were made for) may be any sampler with the same
        trace_key, e.g. other logit biases: its values go into the same channels, nothing is retraced.
        """
        if sampler is not None and sampler.trace_key != self.sampler.trace_key:
            raise ValidationError("SamplerStates.seed: this sampler traces another program than the one these "
                                  "channels serve. Fix: make SamplerStates for it")
        init = (sampler or self.sampler).initial(ctx)
        for s in self.specs:
            if s.name not in init:
                raise ValidationError(f"sampler stage state {s.name!r} has no initial value")
            ch = self.channels[s.name]
            ch.clear()
            ch.put(np.asarray(init[s.name]).astype(s.dtype.np).reshape(s.shape))

    def take(self) -> dict:
        """Traced: every state's current cell (consumed by the pass)."""
        return {n: ch.take() for n, ch in self.channels.items()}

    def put(self, new: dict) -> None:
        """Traced: the next value of every state."""
        missing = set(self.channels) - set(new)
        if missing:
            raise ValidationError(f"sampler step returned no next value for states {sorted(missing)}")
        for n, ch in self.channels.items():
            ch.put(new[n])

    def step(self, logits, allowed=None):
        """Traced: take the states, run the sampler, put the next states; returns the token."""
        token, new = self.sampler.step(logits, self.take(), allowed)
        self.put(new)
        return token


def rng_advance(state):
    """[key, counter + 1]: the next draw's state, loop-carried on the device."""
    return eta.concat([eta.slice_last(state, 0, 1), eta.slice_last(state, 1, 1) + 1])
