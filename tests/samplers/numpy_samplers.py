"""Independent float64 numpy implementations of every sampler rule (written from the papers/HF, not the eta code).

Each keep function takes one row of scaled logits (NaN already -inf) and returns
(keep, ambiguous): `ambiguous` marks tokens whose decision is within float32 rounding of
the threshold, where the device may legitimately differ.
"""

from __future__ import annotations

import numpy as np

TOL = 2e-5


def clean(x) -> np.ndarray:
    """float64 copy with NaN as -inf."""
    x = np.asarray(x, np.float64)
    return np.where(np.isnan(x), -np.inf, x)


def probs(x) -> np.ndarray:
    """softmax (all -inf -> all zero)."""
    if not np.isfinite(x).any():
        return np.zeros_like(x)
    e = np.exp(x - x.max())
    return e / e.sum()


def _rank_prefix(order, mass_before, threshold):
    """keep/ambiguous for 'keep while the mass before it in `order` is < threshold'."""
    keep = np.zeros(order.size, bool)
    amb = np.zeros(order.size, bool)
    keep[order] = mass_before < threshold
    amb[order] = np.abs(mass_before - threshold) < TOL
    return keep, amb


def top_k(x, k):
    order = np.lexsort((np.arange(x.size), -x))
    keep = np.zeros(x.size, bool)
    keep[order[:k]] = True
    return keep, np.zeros(x.size, bool)


def top_p(x, p0):
    p = probs(x)
    order = np.lexsort((np.arange(x.size), -p))
    before = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
    keep, amb = _rank_prefix(order, before, p0)
    # near-equal probabilities may swap places in float32
    sp = p[order]
    close = np.zeros(x.size, bool)
    gap = np.abs(np.diff(sp))
    straddle = keep[order[1:]] != keep[order[:-1]]  # only a swap across the cut changes the kept set
    close[order[1:]] = straddle & (gap > 0) & (gap < TOL * np.maximum(sp[1:], 1e-30))  # exact ties stay exact
    close[order[:-1]] |= close[order[1:]]
    return keep, amb | close


def min_p(x, p0):
    p = probs(x)
    pmax = p.max() if p.size else 0.0
    r = p / pmax if pmax > 0 else p
    return r >= p0, np.abs(r - p0) < TOL


def top_a(x, a):
    p = probs(x)
    thr = a * p.max() ** 2
    return p >= thr, np.abs(p - thr) < TOL * max(thr, 1e-30)


def typical(x, mass):
    p = probs(x)
    ls = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), -np.inf)
    h = -(p[p > 0] * ls[p > 0]).sum()
    d = np.abs(-ls - h)
    order = np.lexsort((np.arange(x.size), d))
    before = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
    keep, amb = _rank_prefix(order, before, mass)
    sd = d[order]
    close = np.zeros(x.size, bool)
    with np.errstate(invalid="ignore"):
        gap = np.abs(np.diff(sd))
    straddle = keep[order[1:]] != keep[order[:-1]]
    close[order[1:]] = straddle & (gap > 0) & (gap < TOL * np.maximum(np.abs(sd[1:]), 1.0))
    close[order[:-1]] |= close[order[1:]]
    return keep & (p > 0), (amb | close) & (p > 0)


def _top(x):
    return x >= x.max() if np.isfinite(x).any() else np.zeros(x.size, bool)


def epsilon_cutoff(x, eps):
    p = probs(x)
    return (p >= eps) | _top(x), np.abs(p - eps) < TOL * eps


def eta_cutoff(x, eta):
    p = probs(x)
    h = -(p[p > 0] * np.log(p[p > 0])).sum()
    thr = min(eta, np.sqrt(eta) * np.exp(-h))
    return (p >= thr) | _top(x), np.abs(p - thr) < TOL * thr


def mirostat_keep(x, mu):
    p = probs(x)
    with np.errstate(divide="ignore"):
        s = -np.log2(p)
    return (s <= mu) | _top(x), np.abs(s - mu) < TOL * max(abs(mu), 1.0)


def mirostat_update(final_logits, token, mu, tau, eta):
    """mu after drawing `token` from softmax(final_logits) (llama.cpp's v2 rule)."""
    p = probs(clean(final_logits))
    s = -np.log2(p[token])
    return mu - eta * (s - tau) if np.isfinite(s) else mu


def penalties(x, counts, repetition=1.0, presence=0.0, frequency=0.0):
    """HF/CTRL repetition penalty, then OpenAI presence/frequency penalties."""
    x = np.asarray(x, np.float64).copy()
    seen = counts > 0
    if repetition != 1.0:
        x = np.where(seen, np.where(x > 0, x / repetition, x * repetition), x)
    return x - presence * seen - frequency * counts
