"""Every truncation stage as per-row data: one rule per stage kind, and the slot layout of a batch.

A batch's rows may each run another chain of truncations (top-k then XTC, Mirostat alone, the
llama.cpp order given by `samplers`...). The layout is one sequence of *slots* that holds every
row's chain as a subsequence (a shortest common supersequence of the chains present); each slot
is one stage kind, and each row enables the slots of its own chain and gives their parameters as
data ([rows, width] f32: per slot an on flag and the stage's fields). A slot a row does not use
leaves its logits as they are. So a batch compiles once per layout (which kinds, in which order),
and new parameter values compile nothing.

Every rule computes what the stage's own keep()/transform() computes for one sequence, with the
parameters as per-row tensors: the same ops in the same order, and the scalars a stage derives
from its parameters (sqrt(eta), the dynamic temperature's bounds) derived on the host in the same
precision, so a row draws exactly what the same request draws alone with the same seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..eta.composites import keep_dims
from .llamacpp import (XTC, XTC_SALT, DynamicTemperature, MirostatV1, TailFree, TopNSigma, dynamic_transform,
                       tail_free_mask, top_n_sigma_mask, xtc_mask)
from .truncations import (EpsilonCutoff, EtaCutoff, MinP, Mirostat, PLess, TopA, TopK, TopP, Typical, epsilon_mask,
                          eta_mask, mirostat_next, p_less_mask, typical_mask)



@dataclass
class RowContext:
    """What the rules read beside the logits: the rows' RNG states [B, 2] (before the draw) and Mirostat's mu."""

    rows: int
    rng: object
    mu: object = None  # f32 [B, 1], when the layout has a Mirostat slot


@dataclass(frozen=True)
class Rule:
    """How one stage kind runs as row data: its fields (host), and its keep mask or transform (traced)."""

    fields: Callable  # stage -> tuple of floats (the row's values; f32 on the device)
    width: int
    keep: Callable | None = None  # (x [B, V], cols: list of [B] f32, ctx) -> bool [B, V]
    transform: Callable | None = None  # (x, cols, ctx) -> logits [B, V] (stages that rescale)
    mirostat: bool = False  # the stage carries mu (updated after the draw)


def _top_k(x, c, ctx):
    return eta.top_k_mask(x, eta.cast(c[0], dtype.i32))


def row_states(r, rows: int) -> list:
    """Traced: each row's u32 [2] RNG state [key, counter] of the rows' states r [rows, 2]."""
    flat = eta.reshape(r, [2 * rows])
    return [eta.slice_last(flat, 2 * b, 2) for b in range(rows)]


def xtc_coins(ctx: RowContext):
    """Traced: each row's XTC coin, f32 [B] in (0, 1), from its RNG state [key ^ XTC_SALT, counter] (as XTC alone)."""
    s = ctx.rng
    salted = eta.concat([eta.bit_xor(eta.slice_last(s, 0, 1), XTC_SALT), eta.slice_last(s, 1, 1)])
    return eta.concat([eta.rng(state, [1]) for state in row_states(salted, ctx.rows)])


def _tail_free(x, c, ctx):
    return eta.broadcast(True, x.shape) if x.shape[-1] <= 2 else tail_free_mask(x, c[0])


def _mirostat(x, c, ctx):
    return Mirostat().keep(x, {"mirostat_mu": ctx.mu})  # its keep reads only mu ([B, 1] against [B, vocab])


def _mirostat_v1(m: int):
    def keep(x, c, ctx):
        return MirostatV1(m=m).keep(x, {"mirostat_mu": ctx.mu})  # its keep reads only m and mu
    return keep


RULES = {
    TopK: Rule(lambda s: (s.k,), 1, keep=_top_k),
    TopP: Rule(lambda s: (s.p,), 1, keep=lambda x, c, ctx: eta.top_p_mask(x, c[0])),
    MinP: Rule(lambda s: (s.p,), 1, keep=lambda x, c, ctx: eta.min_p_mask(x, c[0])),
    Typical: Rule(lambda s: (s.mass,), 1, keep=lambda x, c, ctx: typical_mask(x, c[0])),
    TopA: Rule(lambda s: (s.a,), 1, keep=lambda x, c, ctx: eta.top_a_mask(x, c[0])),
    PLess: Rule(lambda s: (), 0, keep=lambda x, c, ctx: p_less_mask(x)),
    EpsilonCutoff: Rule(lambda s: (s.epsilon,), 1, keep=lambda x, c, ctx: epsilon_mask(x, c[0])),
    EtaCutoff: Rule(lambda s: (s.eta, math.sqrt(s.eta)), 2, keep=lambda x, c, ctx: eta_mask(x, c[0], c[1])),
    TopNSigma: Rule(lambda s: (s.n,), 1, keep=lambda x, c, ctx: top_n_sigma_mask(x, c[0])),
    XTC: Rule(lambda s: (s.probability, s.threshold), 2,
              keep=lambda x, c, ctx: xtc_mask(x, c[0], c[1], xtc_coins(ctx))),
    DynamicTemperature: Rule(lambda s: s.bounds, 4, transform=lambda x, c, ctx: dynamic_transform(x, *c)),
    TailFree: Rule(lambda s: (s.z,), 1, keep=_tail_free),
    Mirostat: Rule(lambda s: (s.tau, s.eta), 2, keep=_mirostat, mirostat=True),
    MirostatV1: Rule(lambda s: (s.tau, s.eta), 2, mirostat=True),
}


def slot_of(stage) -> tuple:
    """The slot kind of a truncation: its class name (and Mirostat v1's m, which sizes its top-m)."""
    if type(stage) not in RULES:
        raise KeyError(type(stage).__name__)
    return (type(stage).__name__, stage.m) if isinstance(stage, MirostatV1) else (type(stage).__name__,)


_BY_NAME = {cls.__name__: cls for cls in RULES}


def _rule(slot: tuple) -> Rule:
    rule = RULES[_BY_NAME[slot[0]]]
    if slot[0] == "MirostatV1":
        return Rule(rule.fields, rule.width, keep=_mirostat_v1(slot[1]), mirostat=True)
    return rule


def supersequence(a: tuple, b: tuple) -> tuple:
    """A shortest sequence holding both a and b as subsequences (ties keep a's items first)."""
    n, m = len(a), len(b)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n, -1, -1):
        for j in range(m, -1, -1):
            if i == n or j == m:
                best[i][j] = (n - i) + (m - j)
            elif a[i] == b[j]:
                best[i][j] = 1 + best[i + 1][j + 1]
            else:
                best[i][j] = 1 + min(best[i + 1][j], best[i][j + 1])
    out, i, j = [], 0, 0
    while i < n or j < m:
        if i < n and j < m and a[i] == b[j]:
            out.append(a[i])
            i, j = i + 1, j + 1
        elif j == m or (i < n and best[i + 1][j] <= best[i][j + 1]):
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return tuple(out)


def layout_of(chains) -> tuple:
    """The slots of a batch whose rows run `chains` (each a tuple of slot kinds): every chain is a subsequence."""
    out: tuple = ()
    for c in sorted(set(chains)):
        out = supersequence(out, c)
    return out


class Layout:
    """The slots of one compiled row epilogue: where each row's chain goes and its parameters."""

    def __init__(self, slots: tuple):
        self.slots = tuple(slots)
        self.rules = [_rule(s) for s in self.slots]
        self.offsets, at = [], 0
        for r in self.rules:
            self.offsets.append(at)
            at += 1 + r.width
        self.width = at  # columns of the [rows, width] parameter channel
        self.mirostat = any(r.mirostat for r in self.rules)

    def place(self, stages: tuple) -> list:
        """Slot index of each of a row's stages (its chain embedded left to right)."""
        out, at = [], 0
        for st in stages:
            kind = slot_of(st)
            while at < len(self.slots) and self.slots[at] != kind:
                at += 1
            if at == len(self.slots):
                raise ValueError(f"the row chain {[type(s).__name__ for s in stages]} does not fit {self.slots}")
            out.append(at)
            at += 1
        return out

    def row(self, stages: tuple) -> np.ndarray:
        """Host: one row's parameter columns (on flags and fields) for its chain."""
        v = np.zeros(self.width, np.float64)
        for st, slot in zip(stages, self.place(stages)):
            at = self.offsets[slot]
            v[at] = 1.0
            v[at + 1: at + 1 + self.rules[slot].width] = self.rules[slot].fields(st)
        return v.astype(np.float32)

    def apply(self, x, params, ctx: RowContext):
        """Traced: the rows' logits after every slot (each row's own stages, in its own order)."""
        B = ctx.rows
        for rule, at in zip(self.rules, self.offsets):
            on = eta.reshape(eta.slice_last(params, at, 1), [B]) > 0.0
            cols = [eta.reshape(eta.slice_last(params, at + 1 + j, 1), [B]) for j in range(rule.width)]
            if rule.transform is not None:
                y = rule.transform(x, cols, ctx)
            else:
                y = eta.mask_apply(x, rule.keep(x, cols, ctx))
            x = eta.select(keep_dims(on, x), y, x)
        return x

    def next_mu(self, params, ctx: RowContext, token, final):
        """Traced: Mirostat's mu [B, 1] after `token` was drawn from the `final` logits (other rows keep theirs)."""
        mu = ctx.mu
        for rule, at in zip(self.rules, self.offsets):
            if rule.mirostat:
                on = eta.slice_last(params, at, 1) > 0.0
                tau, lr = eta.slice_last(params, at + 1, 1), eta.slice_last(params, at + 2, 1)
                mu = eta.select(on, mirostat_next(ctx.mu, token, final, tau, lr), mu)
        return mu


__all__ = ["Layout", "RowContext", "RULES", "layout_of", "row_states", "slot_of", "supersequence", "xtc_coins"]
