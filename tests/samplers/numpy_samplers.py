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


# ---- llama.cpp's samplers, written from src/llama-sampling.cpp as loops over its sorted candidate array ----
# (float64; candidates = finite logits; ties ordered by token id; `x` is one row with NaN already -inf)

def _desc(v) -> np.ndarray:
    """Token ids by v descending, ties by lower id (llama.cpp's sort with a fixed tie order)."""
    return np.lexsort((np.arange(v.size), -v))


def top_n_sigma(x, n):
    """llama_sampler_top_n_sigma_apply: a logit below max - n * std (of the non -inf logits) becomes -inf."""
    keep, amb = np.ones(x.size, bool), np.zeros(x.size, bool)
    if n <= 0 or x.size <= 1:
        return keep, amb
    valid = x != -np.inf
    mx = x[valid].max() if valid.any() else -np.inf
    mean = x[valid].sum() / valid.sum() if valid.any() else 0.0
    std = np.sqrt(((x[valid] - mean) ** 2).sum() / valid.sum()) if valid.any() else 0.0
    thr = mx - n * std
    keep = ~(x < thr)
    with np.errstate(invalid="ignore"):
        amb = np.abs(x - thr) < TOL * max(1.0, abs(thr) if np.isfinite(thr) else 1.0, std)
    return keep, amb & valid & (std > 0)  # equal logits: std is exactly 0 in float32 too


def xtc(x, probability, threshold, chance):
    """llama_sample_xtc_apply with min_keep 0; `chance` is the row's uniform draw (it fires unless chance > p)."""
    keep, amb = np.ones(x.size, bool), np.zeros(x.size, bool)
    if probability <= 0 or threshold > 0.5 or np.isfinite(x).sum() < 2 or chance > probability:
        return keep, amb
    p = probs(x)
    order = [i for i in _desc(p) if np.isfinite(x[i])]  # the candidates, sorted
    pos_last = 0
    for i, tok in enumerate(order):
        if p[tok] >= threshold:
            pos_last = i
        else:
            break
    if pos_last > 0:
        keep[order[:pos_last]] = False
    amb = np.isfinite(x) & (np.abs(p - threshold) < TOL * max(threshold, 1e-30))
    if pos_last > 0:  # near-ties with the kept least likely token may swap places in float32
        pmin = p[order[pos_last]]
        amb |= np.isfinite(x) & (p >= threshold) & (np.abs(p - pmin) < TOL * pmin) & (p != pmin)
        if amb.any():
            amb[order[pos_last]] = True
    return keep, amb


def tail_free(x, z, min_keep=1):
    """llama_sampler_tail_free_apply (llama.cpp before its removal; min_keep 1 as its test_tfs used)."""
    keep, amb = np.ones(x.size, bool), np.zeros(x.size, bool)
    size = int(np.isfinite(x).sum())
    if z >= 1.0 or size <= 2:
        return keep, amb
    p = probs(x)
    order = _desc(p)[:size]
    ps = p[order]
    d1 = ps[:-1] - ps[1:]
    d2 = np.abs(d1[:-1] - d1[1:])
    total = d2.sum()
    norm = d2 / total if total > 1e-6 else np.full(d2.size, 1.0 / d2.size)
    cum = np.cumsum(norm)
    last_idx = size
    for i in range(d2.size):
        if cum[i] > z and i >= min_keep:
            last_idx = i
            break
    keep = np.zeros(x.size, bool)
    keep[order[:last_idx]] = True
    near = [i for i in range(min_keep, d2.size) if abs(cum[i] - z) < TOL] + (
        list(range(d2.size)) if abs(total - 1e-6) < 1e-7 else [])
    for i in near:  # the cut may move by one rank in float32
        amb[order[max(i - 1, 0):i + 2]] = True
    return keep, amb


def mirostat_v1_keep(x, mu, m=100):
    """llama_sampler_mirostat_apply's top-k: k from a Zipf fit of the top m probabilities (pairs of p > 0 only)."""
    p = probs(x)
    order = _desc(p)
    size = int((p > 0).sum())
    n_pairs = min(m - 1, size - 1)
    ps = p[order]
    i = np.arange(max(n_pairs, 0))
    t = np.log((i + 2.0) / (i + 1.0))
    b = np.log(ps[i] / ps[i + 1]) if n_pairs > 0 else np.zeros(0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s_hat = (t * b).sum() / (t * t).sum() if n_pairs > 0 else np.nan
        eps = s_hat - 1.0
        k = (eps * 2.0 ** mu / (1.0 - float(x.size) ** (-eps))) ** (1.0 / s_hat)
    k = float(x.size) if np.isnan(k) else min(max(k, 1.0), float(x.size))
    kk = int(np.floor(k))
    by_logit = _desc(x)
    keep = np.zeros(x.size, bool)
    keep[by_logit[:kk]] = True
    amb = np.zeros(x.size, bool)
    r = round(k)
    if abs(k - r) < 2e-3 * max(1.0, k):  # int(k) may land on either side in float32
        amb[by_logit[max(r - 2, 0):r + 1]] = True
    return keep, amb


def dynamic_temperature(x, temperature, delta, exponent):
    """llama_sampler_temp_ext_apply: the logits after the stage (x are the candidates' unscaled logits)."""
    x = np.asarray(x, np.float64)
    if delta <= 0:
        return x / temperature
    n = int(np.isfinite(x).sum())
    if n <= 1:
        return x / temperature
    lo, hi = max(0.0, temperature - delta), temperature + delta
    p = probs(x)
    h = -(p[p > 0] * np.log(p[p > 0])).sum()
    dyn = lo + (hi - lo) * (h / np.log(n)) ** exponent
    if dyn <= 0:
        out = np.full(x.size, -np.inf)
        out[int(np.argmax(x))] = x.max()
        return out
    return x / dyn


def logit_bias(x, bias: dict):
    """llama_sampler_logit_bias_apply: logit += bias for each listed token (a -inf bias bans it)."""
    x = np.asarray(x, np.float64).copy()
    for tok, b in bias.items():
        x[tok] = -np.inf if b == -np.inf else x[tok] + b
    return x


def dry(x, history, multiplier, base, allowed_length, penalty_last_n, breakers, context_size=4096):
    """llama.cpp's llama_sampler_dry_apply, step for step (ring buffer, restart scan, Z-algorithm, penalties).

    `history`: every accepted token (oldest first); `breakers`: token sequences (head, tail...).
    Returns float32 logits, as llama.cpp computes them (float logit -= float * double pow).
    """
    x = np.asarray(x, np.float32).copy()
    if multiplier == 0.0 or base < 1.0 or penalty_last_n == 0:
        return x
    eff = context_size if penalty_last_n == -1 else max(penalty_last_n, 0)
    last = list(history)[-eff:]  # the ring buffer keeps the last `eff` accepted tokens
    n = min(len(last), eff, context_size)
    if n <= allowed_length:
        return x

    def rat(i):
        return last[len(last) - 1 - i]
    heads: dict = {}
    for b in breakers:
        heads.setdefault(b[0], []).append(list(b[1:]))
    rep_limit = n
    for i in range(n):
        tails = heads.get(rat(i))
        if tails is None:
            continue
        longest = -1
        for t in tails:
            if len(t) > longest and len(t) <= i and all(t[o] == rat(i - o - 1) for o in range(len(t))):
                longest = len(t)
        if longest >= 0:
            rep_limit = i - longest
            break
    if rep_limit < allowed_length:
        return x
    count = [0] * n
    lst, rt, lt = n - 1, 0, 0
    for k in range(1, n):
        if k > rt:
            m = 0
            while m + k < n and rat(m) == rat(m + k):
                m += 1
            count[lst - k] = min(m, rep_limit)
            if m > 0:
                lt, rt = k, k + m - 1
        else:
            p = k - lt
            right = rt - k + 1
            if count[lst - p] < right:
                count[lst - k] = min(count[lst - p], rep_limit)
            else:
                i = rt + 1
                while i < n and rat(i) == rat(i - k):
                    i += 1
                count[lst - k] = min(i - k, rep_limit)
                lt, rt = k, i - 1
    best: dict = {}
    for i in range(n - 1):
        r = count[i]
        if r >= allowed_length:
            tok = rat(n - 2 - i)
            if tok not in best or best[tok] < r:
                best[tok] = r
    b32 = np.float32(base)
    max_exp = int(np.float32(88.7228391) / np.float32(np.log(b32))) if b32 > np.float32(1.000001) else 0
    for tok, r in best.items():
        if not 0 <= tok < x.size or any(len(t) == 0 for t in heads.get(tok, [])):
            continue
        e = r - allowed_length
        if max_exp > 0 and e > max_exp:
            e = max_exp
        x[tok] = np.float32(np.float64(x[tok]) - np.float64(np.float32(multiplier)) * np.float64(b32) ** e)
    return x
