"""A batched row's sampler settings (RowParams), its host-side state (RowState), what shapes a batch's epilogue."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ValidationError
from .chain import Sampler
from .dry import DRY
from .llamacpp import LogitBias
from .penalties import Penalties
from .row_dry import dry_shape
from .row_stages import RULES, layout_of, slot_of
from .state import check_temperature
from .truncations import MinP, Mirostat, TopK, TopP, Typical

CLASSIC = (TopK, TopP, MinP, Typical)  # the truncations RowParams has fields for, in the order they apply
TOP_LOGPROBS = 20  # the most alternatives a row may ask for (OpenAI's limit); the epilogue always computes this many
FLAGS = ("sample", "logprobs", "penalties", "bias", "mask", "top_logprobs")


@dataclass(frozen=True)
class RowParams:
    """One row's sampler settings (llama.cpp's off values: top_k 0, top_p 1, min_p 0; temperature 0 is greedy).

    `chain`: the row's truncations as stage objects, in order, for any chain the four classic
    fields cannot say (XTC, Mirostat, top-n-sigma, p-less, another order...); the classic fields
    are then off. `dry`: a DRY stage with its breakers resolved (Sampler.for_tokenizer), or None.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0
    logprobs: bool = False  # also return each drawn token's log-probability under the model (log_softmax)
    repetition_penalty: float = 1.0  # CTRL-style over the row's seen tokens (prompt and drawn), 1 = off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple = ()  # ((token_id, bias), ...) sorted, as LogitBias holds them
    top_logprobs: int = 0  # also return the k most likely tokens and their log-probabilities (k <= TOP_LOGPROBS)
    constrained: bool = False  # a grammar mask comes from the row's RowState each pass
    typical_p: float = 1.0  # locally typical sampling mass, 1 = off
    chain: tuple = ()
    dry: object = None
    program: object = None  # an eta Program (logits f32[vocab], state u32[2]) -> token: the row's whole sampler
    automaton: int = 0  # the padded table size of the row's device grammar automaton (its RowState holds it), 0: none

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        TopK(self.top_k), TopP(self.top_p), MinP(self.min_p), Typical(self.typical_p)  # the same checks and messages
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < (1 << 32):
            raise ValidationError(f"seed must be an int in [0, 2^32), got {self.seed!r}")
        pen = Penalties(self.repetition_penalty, self.presence_penalty, self.frequency_penalty)
        object.__setattr__(self, "repetition_penalty", pen.repetition)
        object.__setattr__(self, "presence_penalty", pen.presence)
        object.__setattr__(self, "frequency_penalty", pen.frequency)
        object.__setattr__(self, "logit_bias", LogitBias(self.logit_bias).bias)
        k = self.top_logprobs
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= TOP_LOGPROBS:
            raise ValidationError(f"top_logprobs must be an int in 0..{TOP_LOGPROBS}, got {k!r}")
        chain = tuple(t for t in self.chain if not t.off)
        bad = [t for t in chain if type(t) not in RULES]
        if bad:
            raise ValidationError(f"RowParams: {bad[0]!r} is not a truncation stage a row can run. Fix: use the "
                                  f"stages of piegpu.samplers ({sorted(c.__name__ for c in RULES)})")
        if chain and (self.top_k, self.top_p, self.min_p, self.typical_p) != (0, 1.0, 0.0, 1.0):
            raise ValidationError("RowParams: give the truncations either as chain= or as top_k/top_p/min_p/"
                                  "typical_p, not both. Fix: put them all in the chain")
        miro = [i for i, t in enumerate(chain) if isinstance(t, Mirostat)]
        if miro and miro != [len(chain) - 1]:
            raise ValidationError("RowParams: Mirostat must be the last truncation, once. Fix: move it last")
        object.__setattr__(self, "chain", chain)
        if self.program is not None:
            if chain or self.dry is not None or self.penalized or self.logit_bias or self.constrained or self.automaton or (
                    self.top_k, self.top_p, self.min_p, self.typical_p) != (0, 1.0, 0.0, 1.0):
                raise ValidationError("RowParams: a sampler program is the row's whole sampler; it takes no other "
                                      "stage, penalty, bias or grammar. Fix: trace them into the program")
            object.__setattr__(self, "temperature", 1.0)
        if self.dry is not None:
            if not isinstance(self.dry, DRY) or self.dry.needs_tokenizer:
                raise ValidationError("RowParams: dry must be a DRY stage with its breakers resolved "
                                      "(sampler.for_tokenizer(tokenizer)). Fix: pass the tokenizer to row_params")
            if self.dry.off:
                object.__setattr__(self, "dry", None)

    @property
    def penalized(self) -> bool:
        """Whether any penalty is on (then the row's seen-token counts go to the device each pass)."""
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def truncations(self) -> tuple:
        """The row's truncation stages in the order they apply (none when greedy)."""
        if self.temperature == 0.0 or self.program is not None:
            return ()
        if self.chain:
            return self.chain
        stages = (TopK(self.top_k), TopP(self.top_p), MinP(self.min_p), Typical(self.typical_p))
        return tuple(t for t in stages if not t.off)

    @property
    def mirostat(self) -> bool:
        """Whether the row carries Mirostat's mu (read back with each token)."""
        return any(isinstance(t, Mirostat) for t in self.truncations)

    @classmethod
    def of(cls, sampler: Sampler, seed: int = 0, logprobs: bool = False, top_logprobs: int = 0,
           constrained: bool = False, tokenizer=None) -> "RowParams":
        """The row settings equal to `sampler` (`tokenizer` resolves DRY's string breakers; ValidationError for a
        stage a row cannot carry)."""
        if tokenizer is not None:
            sampler = sampler.for_tokenizer(tokenizer)
        procs = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "logit_bias": ()}
        dry, order = None, []
        for p in sampler.processors:
            if isinstance(p, Penalties):
                procs.update(repetition_penalty=p.repetition, presence_penalty=p.presence,
                             frequency_penalty=p.frequency)
            elif isinstance(p, LogitBias):
                procs["logit_bias"] = p.bias
            elif isinstance(p, DRY):
                if p.needs_tokenizer:
                    raise ValidationError("batched sampling: DRY's string sequence breakers need the model's "
                                          "tokenizer. Fix: pass tokenizer= (generate_batch and the server do)")
                dry = p
            else:
                raise ValidationError(f"batched sampling carries logit bias, repetition/presence/frequency "
                                      f"penalties and DRY, not {p!r}. Fix: drop it, or generate this request alone")
            order.append((LogitBias, Penalties, DRY).index(type(p)))
        if order != sorted(order):
            raise ValidationError("batched sampling applies the logit bias, then the penalties, then DRY (llama.cpp's "
                                  "order); this sampler has another. Fix: build it with from_spec or with_penalties")
        truncs = () if sampler.greedy else sampler.truncations
        for t in truncs:
            if type(t) not in RULES:
                raise ValidationError(f"batched sampling has no row form of {t!r}. Fix: use the stages of "
                                      f"piegpu.samplers, or generate this request alone")
        kinds = [type(t) for t in truncs]
        if all(k in CLASSIC for k in kinds) and len(set(kinds)) == len(kinds) and kinds == sorted(kinds,
                                                                                                 key=CLASSIC.index):
            v = {k: t for k, t in zip(kinds, truncs)}
            return cls(sampler.temperature, v[TopK].k if TopK in v else 0, v[TopP].p if TopP in v else 1.0,
                       v[MinP].p if MinP in v else 0.0, seed, logprobs, **procs, top_logprobs=top_logprobs,
                       constrained=constrained, typical_p=v[Typical].mass if Typical in v else 1.0, dry=dry)
        return cls(sampler.temperature, seed=seed, logprobs=logprobs, **procs, top_logprobs=top_logprobs,
                   constrained=constrained, chain=tuple(truncs), dry=dry)


@dataclass(frozen=True)
class RowKey:
    """What shapes a batch's row epilogue: the flags of the stages present, the truncation slots, DRY's shapes."""

    flags: frozenset
    slots: tuple = ()
    dry: tuple | None = None  # (L, J, K, S) when a row has DRY
    programs: tuple = ()  # per row its sampler program or None, when any row has one
    table: int = 0  # entries per row of the device grammar tables, when any row has an automaton

    def __contains__(self, flag: str) -> bool:
        return flag in self.flags


def structure_of(params: list) -> RowKey:
    """The RowKey of a batch of rows: which stages are needed at all and the slot layout of their truncations.

    Parameter values are device data; only whether a stage is needed at all (and the order of the
    truncations) shapes the epilogue, so an all-greedy batch costs one argmax and a new top_p value
    compiles nothing.
    """
    need = set()
    for p in params:
        for flag, on in (("logprobs", p.logprobs), ("top_logprobs", p.top_logprobs), ("penalties", p.penalized),
                         ("bias", p.logit_bias), ("mask", p.constrained),
                         ("sample", p.temperature > 0 and p.program is None)):
            if on:
                need.add(flag)
    slots = layout_of(tuple(slot_of(t) for t in p.truncations) for p in params)
    drys = [p.dry for p in params if p.dry is not None]
    programs = tuple(p.program for p in params) if any(p.program is not None for p in params) else ()
    table = max((p.automaton for p in params), default=0)
    return RowKey(frozenset(need), slots, dry_shape(drys) if drys else None, programs, table)


class RowState:
    """Host-side data of one row that changes as it decodes: seen-token counts, a grammar constraint, the token
    history (DRY) and Mirostat's mu (read back from the device with each token).

    `constraint` (or None) is any object with mask_into(words) -- write the allowed tokens as
    packed u32 words (bit i of word i >> 5 = token i) -- and consume(token): a Matcher of
    piegpu.inferlets.grammar.
    """

    def __init__(self, params: RowParams, vocab: int, tokens=(), constraint=None, automaton=None):
        if params.constrained and constraint is None:
            raise ValidationError("RowState: the row is constrained but has no constraint. Fix: pass one")
        if bool(params.automaton) != (automaton is not None):
            raise ValidationError("RowState: a row with a device automaton needs it (and only such a row). Fix: pass "
                                  "automaton= with params.automaton set to its padded table size")
        self.automaton = automaton  # a TokenAutomaton the device follows; the host follows it from the tokens
        self.automaton_state = 0
        self.counts = None
        if params.penalized:
            ids = np.asarray(list(tokens), np.int64)
            self.counts = np.bincount(ids[(ids >= 0) & (ids < vocab)], minlength=vocab).astype(np.int32)
        self.constraint = constraint
        self._window = params.dry.window if params.dry is not None else 0
        self.history = [int(t) for t in tokens][-self._window:] if params.dry is not None else None
        self.mu = None
        if params.mirostat:
            self.mu = np.float32(2.0 * params.truncations[-1].tau)  # as Mirostat.initial

    def observe(self, token: int, carried=None) -> None:
        """Host: the row drew `token` (counted; the constraint advances); `carried`: its device state after it (mu)."""
        if self.counts is not None and 0 <= token < len(self.counts):
            self.counts[token] += 1
        if self.constraint is not None:
            self.constraint.consume(token)
        if self.automaton is not None:
            nxt = self.automaton.next(self.automaton_state, token)
            if nxt < 0 and not self.automaton.accepting[self.automaton_state]:
                raise ValidationError(f"device grammar: token {token} is not allowed in the row's automaton state; "
                                      "the device and host tables disagree (please report it)")
            if nxt >= 0:  # (a stop token outside the tables ends the row in its accepting state)
                self.automaton_state = nxt
        if self.history is not None:
            self.history.append(int(token))
            if len(self.history) > 2 * self._window:
                del self.history[:-self._window]
        if self.mu is not None and carried is not None:
            self.mu = np.float32(carried[0])


__all__ = ["RowParams", "RowState", "RowKey", "structure_of", "TOP_LOGPROBS", "FLAGS"]
