"""Truncation stages: which tokens a sampler may draw from the scaled logits (all along the last axis)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta.composites import keep_dims
from .state import StateSpec, Truncation, check_unit

LN2 = math.log(2.0)
NEG_INF = float("-inf")


def keep_all(x: eta.Tensor) -> eta.Tensor:
    """The keep mask of an off stage: every token (a constant, no reduction)."""
    return eta.broadcast(True, x.shape)


def _top(x):
    """The argmax token(s) of x, which every cutoff keeps so the kept set is never empty."""
    return x >= keep_dims(eta.reduce_max(x), x)


@dataclass(frozen=True)
class TopK(Truncation):
    """Keep the k most likely tokens (ties -> lower id); k = 0 keeps every token (off)."""

    k: int
    name = "top-k"

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ValidationError(f"top_k: k must be an int >= 0 (0 = off), got {self.k!r}. "
                                  "Fix: pass a whole number such as 40, or 0 for no top-k")

    @property
    def off(self) -> bool:
        return self.k == 0

    def keep(self, x, states):
        if self.off or self.k >= x.shape[-1]:
            return keep_all(x)
        return eta.top_k_mask(x, self.k)


@dataclass(frozen=True)
class TopP(Truncation):
    """Nucleus: keep a token when the mass before it in descending order is < p; p = 1 is off.

    Off is exact: at p = 1 the float32 mass before a tail token can round up to 1 and
    drop it, so p = 1 keeps every token without computing the mask (as llama.cpp does).
    """

    p: float
    name = "top-p"

    def __post_init__(self):
        object.__setattr__(self, "p", check_unit(self.p, "top_p", "p", off="1"))

    @property
    def off(self) -> bool:
        return self.p == 1.0

    def keep(self, x, states):
        return keep_all(x) if self.off else eta.top_p_mask(x, self.p)


@dataclass(frozen=True)
class MinP(Truncation):
    """Keep tokens with prob >= p * max_prob; p = 0 is off."""

    p: float
    name = "min-p"

    def __post_init__(self):
        object.__setattr__(self, "p", check_unit(self.p, "min_p", "p", zero=True, off="0"))

    @property
    def off(self) -> bool:
        return self.p == 0.0

    def keep(self, x, states):
        return keep_all(x) if self.off else eta.min_p_mask(x, self.p)


@dataclass(frozen=True)
class TopA(Truncation):
    """Keep tokens with prob >= a * max_prob^2; a = 0 is off."""

    a: float
    name = "top-a"

    def __post_init__(self):
        try:
            a = float(self.a)
        except (TypeError, ValueError):
            a = float("nan")
        if not (a >= 0.0 and math.isfinite(a)):
            raise ValidationError(f"top_a: a must be a finite number >= 0 (0 = off), got {self.a!r}")
        object.__setattr__(self, "a", a)

    @property
    def off(self) -> bool:
        return self.a == 0.0

    def keep(self, x, states):
        return keep_all(x) if self.off else eta.top_a_mask(x, self.a)


@dataclass(frozen=True)
class Typical(Truncation):
    """Locally typical sampling: keep the tokens whose surprise is closest to the entropy, up to `mass`.

    Tokens are ordered by |-log p - H| ascending (ties -> lower id); a token is kept when
    the probability mass of the tokens before it in that order is < mass (the top-p rule).
    mass = 1 is off (every token).
    """

    mass: float
    name = "typical"

    def __post_init__(self):
        object.__setattr__(self, "mass", check_unit(self.mass, "typical", "mass", off="1"))

    @property
    def off(self) -> bool:
        return self.mass == 1.0

    def keep(self, x, states):
        if self.off:
            return keep_all(x)
        return typical_mask(x, self.mass)


def typical_mask(x, mass):
    """Traced: the keep mask of locally typical sampling on (scaled) logits x [..., vocab].

    `mass` is a Python float or an f32 tensor of one value per row (device data: batched rows);
    a row's mass >= 1 keeps every token.
    """
    ls = eta.log_softmax(x)
    p = eta.exp(ls)
    p = eta.select(eta.isnan(p), 0.0, p)  # all -inf logits: nothing is likely
    h = eta.neg(eta.reduce_sum(eta.select(p > 0.0, p * ls, 0.0)))
    dist = eta.abs_(eta.neg(ls) - keep_dims(h, x))  # >= 0; +inf for impossible tokens
    dist = eta.select(eta.isnan(dist), float("inf"), dist)
    keep = eta.and_(_ascending_mass_mask(dist, p, mass), x > NEG_INF)
    if isinstance(mass, float):
        return keep
    return eta.or_(keep, keep_dims(mass >= 1.0, x))


def _ascending_mass_mask(key, p, mass):
    """Keep an element when the mass of the elements before it in (key asc, index asc) order is < mass.

    No sort: key >= 0, so its f32 bit patterns order like its values. A 32-step bisection
    finds B0, the largest pattern whose strictly-smaller mass F(B0) is < mass; elements
    below B0 are kept, those above are not, and ties at B0 are kept in index order
    while F(B0) + (tied mass before them) < mass. 33 reductions instead of a vocab sort.
    """
    bits = eta.bitcast(key, dtype.u32)
    lead = key.shape[:-1]
    lo = eta.broadcast(eta.cast(0, dtype.u32), lead)
    hi = eta.broadcast(eta.cast(eta.broadcast(0xFFFFFFFF, []), dtype.u32), lead)

    def mass_below(b):
        return eta.reduce_sum(eta.select(bits < keep_dims(b, key), p, 0.0))

    for _ in range(32):  # invariant: mass_below(lo) < mass; the answer is in [lo, hi]
        mid = hi - (hi - lo) // 2
        ok = mass_below(mid) < mass
        lo = eta.select(ok, mid, lo)
        hi = eta.select(ok, hi, mid - 1)
    b0 = keep_dims(lo, key)
    tie = eta.eq(bits, b0)
    tied_p = eta.select(tie, p, 0.0)
    before = eta.cumsum(tied_p) - tied_p  # tied mass at a lower index
    limit = mass if isinstance(mass, float) else keep_dims(mass, key)  # a per-row mass: one per row
    keep_tie = eta.and_(tie, keep_dims(mass_below(lo), key) + before < limit)
    return eta.or_(bits < b0, keep_tie)


P_LESS_SLACK = 1e-5  # relative: p ties with sum p^2 (a uniform distribution) survive float32 rounding


def p_less_mask(x):
    """Traced: the keep mask of p-less sampling on logits x: p >= sum(p^2) (with P_LESS_SLACK), and the top token."""
    p = eta.softmax(x)
    p = eta.select(eta.isnan(p), 0.0, p)  # all -inf logits: nothing is likely
    thr = eta.reduce_sum(p * p) * (1.0 - P_LESS_SLACK)
    return eta.or_(p >= keep_dims(thr, x), _top(x))


@dataclass(frozen=True)
class PLess(Truncation):
    """p-less sampling (llama.cpp's p_less): keep the tokens whose probability is >= the sum of squared probabilities.

    sum p^2 is the chance that two draws agree, so a token is kept when it is at least as likely
    as that: a peaked distribution keeps few tokens, a flat one many (a uniform one all). It has no
    parameter; `on=False` is off. The most likely token always passes (max p >= sum p^2), and a
    relative slack of P_LESS_SLACK keeps tokens that tie with the threshold (a uniform row) despite
    float32 rounding of the sum.
    """

    on: bool = True
    name = "p-less"

    def __post_init__(self):
        if not isinstance(self.on, (bool, np.bool_)) and self.on not in (0, 1):
            raise ValidationError(f"p_less: pass True (on) or False (off), got {self.on!r}")
        object.__setattr__(self, "on", bool(self.on))

    @property
    def off(self) -> bool:
        return not self.on

    def keep(self, x, states):
        return keep_all(x) if self.off else p_less_mask(x)


@dataclass(frozen=True)
class EpsilonCutoff(Truncation):
    """Epsilon sampling: keep tokens with prob >= epsilon (and always the most likely); 0 is off."""

    epsilon: float
    name = "epsilon-cutoff"

    def __post_init__(self):
        object.__setattr__(self, "epsilon", check_unit(self.epsilon, "epsilon_cutoff", "epsilon", zero=True,
                                                       one=False, off="0"))

    @property
    def off(self) -> bool:
        return self.epsilon == 0.0

    def keep(self, x, states):
        return keep_all(x) if self.off else epsilon_mask(x, self.epsilon)


def epsilon_mask(x, epsilon):
    """Traced: prob >= epsilon, and the most likely token (`epsilon` a float or f32 [rows] per-row data)."""
    return eta.or_(eta.softmax(x) >= (epsilon if isinstance(epsilon, float) else keep_dims(epsilon, x)), _top(x))


@dataclass(frozen=True)
class EtaCutoff(Truncation):
    """Eta sampling: keep tokens with prob >= min(eta, sqrt(eta) * exp(-entropy)) (and the most likely); 0 is off."""

    eta: float
    name = "eta-cutoff"

    def __post_init__(self):
        object.__setattr__(self, "eta", check_unit(self.eta, "eta_cutoff", "eta", zero=True, one=False, off="0"))

    @property
    def off(self) -> bool:
        return self.eta == 0.0

    def keep(self, x, states):
        return keep_all(x) if self.off else eta_mask(x, self.eta, math.sqrt(self.eta))


def eta_mask(x, eta_, sqrt_eta):
    """Traced: prob >= min(eta, sqrt(eta) * exp(-entropy)), and the most likely token (floats or f32 [rows] data)."""
    p = eta.softmax(x)
    h = eta.entropy(p)
    thr = eta.minimum(eta.exp(eta.neg(h)) * sqrt_eta, eta_)
    return eta.or_(p >= keep_dims(thr, x), _top(x))


@dataclass(frozen=True)
class Mirostat(Truncation):
    """Mirostat v2: keep tokens with surprise -log2 p <= mu; after each draw mu -= eta * (surprise - tau).

    mu starts at 2 * tau and lives in a device channel; the observed surprise is that of
    the drawn token under the renormalised kept distribution (as llama.cpp computes it).
    """

    tau: float = 5.0
    eta: float = 0.1
    name = "mirostat"

    def __post_init__(self):
        tau, lr = float(self.tau), float(self.eta)
        if not (tau > 0 and math.isfinite(tau)):
            raise ValidationError(f"mirostat: tau (target surprise, bits) must be > 0, got {self.tau!r}")
        if not (lr > 0 and math.isfinite(lr)):
            raise ValidationError(f"mirostat: eta (learning rate) must be > 0, got {self.eta!r}")
        object.__setattr__(self, "tau", tau)
        object.__setattr__(self, "eta", lr)

    def states(self, vocab):
        return (StateSpec("mirostat_mu", (1,), dtype.f32),)

    def initial(self, ctx):
        return {"mirostat_mu": np.array([2.0 * self.tau], np.float32)}

    def keep(self, x, states):
        mu = states["mirostat_mu"]
        surprise = eta.neg(eta.log_softmax(x)) * (1.0 / LN2)
        return eta.or_(surprise <= mu, _top(x))

    def update(self, states, token, final):
        return {"mirostat_mu": mirostat_next(states["mirostat_mu"], token, final, self.tau, self.eta)}


def mirostat_next(mu, token, final, tau, lr):
    """Traced: mu after drawing `token` from the `final` logits: mu - lr * (surprise - tau), kept when not finite.

    mu is [..., 1]; tau and lr are floats or f32 [..., 1] per-row data.
    """
    idx = eta.reshape(eta.cast(token, dtype.i32), token.shape + (1,))
    lp = eta.take_last(eta.log_softmax(final), idx)  # [..., 1]
    surprise = eta.neg(lp) * (1.0 / LN2)
    new = mu - (surprise - tau) * lr
    ok = eta.not_(eta.or_(eta.isnan(surprise), eta.isinf(surprise)))
    return eta.select(ok, new, mu)
