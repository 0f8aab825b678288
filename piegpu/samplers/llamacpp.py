"""llama.cpp's other samplers as device stages: XTC, top-n-sigma, dynamic temperature, tail-free,
Mirostat v1 and logit bias.

Each follows src/llama-sampling.cpp of ggml-org/llama.cpp (tail-free from the version before
its removal in late 2024); the differences are in the docstrings. Three hold for all of them:

- piegpu applies the temperature before the truncations (transformers' warper order), llama.cpp
  after them; at temperature 1, and for the scale-free top-n-sigma, the two agree.
- llama.cpp's candidates are the entries of its (shrinking) array; here they are the tokens whose
  logit is still finite after the earlier stages, and a removed token is -inf.
- Ties in probability are ordered by token id (lower first); llama.cpp's std::sort leaves that order
  unspecified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import eta
from ..dtypes import dtype
from ..errors import ValidationError
from ..eta.composites import keep_dims
from .state import RNG_STATE, Processor, StateSpec, Truncation, check_temperature, check_unit
from .truncations import Mirostat, keep_all

NEG_INF = float("-inf")
F32_MAX = float(np.finfo(np.float32).max)
XTC_SALT = 0x58544321  # "XTC!": XTC's coin comes from the RNG key xor this, a stream apart from the draw's noise


def _probs(x):
    """softmax(x) with an all -inf row giving zeros instead of NaN."""
    p = eta.softmax(x)
    return eta.select(eta.isnan(p), 0.0, p)


def _count(mask):
    """i32 number of true entries along the last axis."""
    return eta.reduce_sum(eta.cast(mask, dtype.i32))


def _finite_number(v, fn: str, name: str, lo: float | None = None, note: str = "") -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = float("nan")
    if isinstance(v, bool) or not math.isfinite(f) or (lo is not None and f < lo):
        want = "a finite number" + (f" >= {lo:g}" if lo is not None else "")
        raise ValidationError(f"{fn}: {name} must be {want}{note}, got {v!r}. Fix: pass {want}")
    return f


@dataclass(frozen=True)
class TopNSigma(Truncation):
    """Top-n-sigma (Tang et al. 2024): keep tokens with logit >= max - n * std of the finite logits; n <= 0 is off.

    llama.cpp's llama_sampler_top_n_sigma_apply: mean and population std over the logits that
    are not -inf, and a logit below max - n*std becomes -inf. The mask does not depend on the
    temperature (max and std scale alike), so running after piegpu's temperature changes nothing.
    """

    n: float
    name = "top-n-sigma"

    def __post_init__(self):
        object.__setattr__(self, "n", _finite_number(self.n, "top_n_sigma", "n", note=" (<= 0 = off)"))

    @property
    def off(self) -> bool:
        return self.n <= 0.0

    def keep(self, x, states):
        return keep_all(x) if self.off else top_n_sigma_mask(x, self.n)


def top_n_sigma_mask(x, n):
    """Traced: logit >= max - n * std of the finite logits (`n` a float, or f32 [rows] per-row data)."""
    finite = x > NEG_INF
    cnt = eta.maximum(eta.cast(_count(finite), dtype.f32), 1.0)  # no finite logit: mean 0, std 0
    mean = eta.reduce_sum(eta.select(finite, x, 0.0)) / cnt
    dev = eta.select(finite, x - keep_dims(mean, x), 0.0)
    std = eta.sqrt(eta.reduce_sum(dev * dev) / cnt)
    thr = eta.reduce_max(x) - std * n
    return eta.not_(x < keep_dims(thr, x))


@dataclass(frozen=True)
class XTC(Truncation):
    """Exclude Top Choices: with chance `probability`, drop every token with prob >= threshold but the least likely one.

    llama.cpp's llama_sample_xtc_apply: nothing happens when fewer than two tokens reach the
    threshold; probability 0 or threshold > 0.5 is off. The coin is a uniform u in (0, 1) per row
    from the sampler's RNG state (key xor XTC_SALT, same counter), so runs are seeded and
    reproducible; XTC fires when u <= probability (llama.cpp: unless chance > probability), so
    probability 1 always fires. Among tied least-likely tokens the one with the highest id is the
    one kept (the last in the by-id tie order). Only finite tokens count: a threshold of 0 keeps
    the least likely possible token, not a -inf one. min_keep is llama.cpp's default 0.
    """

    probability: float = 0.0
    threshold: float = 0.1
    name = "xtc"

    def __post_init__(self):
        object.__setattr__(self, "probability", check_unit(self.probability, "xtc", "probability", zero=True,
                                                           off="0"))
        object.__setattr__(self, "threshold", check_unit(self.threshold, "xtc", "threshold", zero=True,
                                                         off="> 0.5"))

    @property
    def off(self) -> bool:
        return self.probability == 0.0 or self.threshold > 0.5

    def keep(self, x, states):
        if self.off:
            return keep_all(x)
        coin = xtc_coin(states, x.shape[:-1]) if self.probability < 1.0 else None  # probability 1 always fires
        return xtc_mask(x, self.probability, self.threshold, coin)


def per_row(v, like):
    """A stage parameter against `like` [..., vocab]: a Python number as it is, per-row data [rows] broadcast."""
    return v if isinstance(v, (int, float)) else keep_dims(v, like)


def xtc_mask(x, probability, threshold, coin):
    """Traced: XTC's keep mask; `coin` (uniform in (0, 1) per row, or None: always fire) <= probability fires it.

    `probability` and `threshold` are floats or f32 [rows] per-row data.
    """
    p = _probs(x)
    above = eta.and_(p >= per_row(threshold, x), x > NEG_INF)
    pmin = eta.reduce_min(eta.select(above, p, float("inf")))
    tie = eta.and_(above, eta.eq(p, keep_dims(pmin, x)))
    tie_i = eta.cast(tie, dtype.i32)
    last = eta.and_(tie, eta.eq(eta.cumsum(tie_i), keep_dims(eta.reduce_sum(tie_i), x)))
    fire = _count(above) >= 2
    if coin is not None:
        fire = eta.and_(fire, coin <= probability)
    return eta.not_(eta.and_(eta.and_(above, eta.not_(last)), keep_dims(fire, x)))


def xtc_coin(states: dict, lead: tuple):
    """Traced: XTC's uniform in (0, 1) for each row (shape `lead`), from the RNG state [key ^ XTC_SALT, counter]."""
    if RNG_STATE not in states:
        raise ValidationError("XTC: needs the sampler's RNG state. Fix: pass states with 'rng' "
                              "(Sampler.step and SamplerStates do)")
    s = states[RNG_STATE]
    salted = eta.concat([eta.bit_xor(eta.slice_last(s, 0, 1), XTC_SALT), eta.slice_last(s, 1, 1)])
    return eta.rng(salted, list(lead))


@dataclass(frozen=True)
class DynamicTemperature(Truncation):
    """Entropy-scaled temperature (llama.cpp's temp_ext, --dynatemp-range/--dynatemp-exponent).

    The temperature T' = lo + (hi - lo) * (H / log n)^exponent with lo = max(0, T - delta),
    hi = T + delta, H the entropy of the candidates' distribution at temperature 1 and n their
    number. delta = 0 is plain temperature T: a Sampler folds such a stage into its temperature,
    so it traces nothing more. In a Sampler this stage's T is the sampler's temperature, applied
    first as always (the truncations see logits / T); the stage, placed last among the truncations
    where llama.cpp applies temperature, recovers the unscaled logits of the remaining candidates,
    computes T' and leaves logits / T'. T' = 0 keeps only the most likely token (lowest id on ties).
    Temperature 0 is greedy in piegpu (llama.cpp would still scale by up to delta).
    """

    temperature: float = 1.0
    delta: float = 0.0
    exponent: float = 1.0
    name = "dynamic-temperature"

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        object.__setattr__(self, "delta", _finite_number(self.delta, "dynatemp", "delta (range)", 0.0,
                                                         " (0 = plain temperature)"))
        object.__setattr__(self, "exponent", _finite_number(self.exponent, "dynatemp", "exponent", 0.0))

    @property
    def off(self) -> bool:
        """delta 0: plain temperature (Sampler takes the temperature and drops the stage)."""
        return self.delta == 0.0

    @property
    def bounds(self) -> tuple:
        """(T, lo, hi - lo, exponent): the temperature's range as the stage computes it (in double)."""
        lo, hi = max(0.0, self.temperature - self.delta), self.temperature + self.delta
        return (self.temperature, lo, hi - lo, self.exponent)

    def keep(self, x, states):
        if self.off:
            return keep_all(x)
        _, n, dyn = dynamic_temperature(x, *self.bounds)
        greedy = eta.and_(dyn <= 0.0, n > 1.0)
        return eta.select(keep_dims(greedy, x), _first_max(x), x > NEG_INF)

    def transform(self, x, states):
        return x if self.off else dynamic_transform(x, *self.bounds)


def dynamic_temperature(x, t, lo, span, exponent):
    """Traced: (unscaled logits, number of candidates, T') for logits x already divided by T.

    T' = lo + span * (H / log n)^exponent; every parameter is a float or f32 [rows] per-row data.
    """
    z = x if isinstance(t, float) and t == 1.0 else x * per_row(t, x)
    n = eta.cast(_count(z > NEG_INF), dtype.f32)
    p = _probs(z)
    h = eta.neg(eta.reduce_sum(eta.select(p > 0.0, p * eta.log(eta.select(p > 0.0, p, 1.0)), 0.0)))
    norm = h / eta.log(eta.maximum(n, 2.0))
    if isinstance(exponent, float) and exponent == 0.0:
        shaped = eta.broadcast(1.0, norm.shape)  # x^0 = 1, also at x = 0 (powf)
    else:
        shaped = eta.select(norm > 0.0, eta.pow(eta.maximum(norm, 1e-30), exponent), 0.0)
        if not isinstance(exponent, float):
            shaped = eta.select(eta.eq(exponent, 0.0), 1.0, shaped)
    return z, n, shaped * span + lo


def dynamic_transform(x, t, lo, span, exponent):
    """Traced: the logits at the dynamic temperature T' (see dynamic_temperature)."""
    z, n, dyn = dynamic_temperature(x, t, lo, span, exponent)
    safe = eta.select(dyn > 0.0, dyn, 1.0)
    scaled = eta.minimum(z / keep_dims(safe, x), F32_MAX)
    scaled = eta.select(keep_dims(dyn > 0.0, x), scaled, eta.mask_apply(x, _first_max(x)))
    return eta.select(keep_dims(n > 1.0, x), scaled, x)  # one candidate or none: llama.cpp leaves it


def _first_max(x):
    """The argmax token's one-hot mask (lowest id on ties)."""
    ids = eta.cast(eta.iota(x.shape[-1]), dtype.i32)
    return eta.eq(ids, keep_dims(eta.reduce_argmax(x), x))


@dataclass(frozen=True)
class TailFree(Truncation):
    """Tail-free sampling (Phillips 2019): cut the sorted distribution where the curvature mass passes z; z = 1 is off.

    llama.cpp's llama_sampler_tail_free_apply (removed from llama.cpp in late 2024): sort the
    candidates' probabilities descending, take |second differences|, normalise them (uniform when
    their sum is <= 1e-6), and keep the first i tokens, i the first index >= min_keep whose
    cumulative mass exceeds z (all tokens when none does); fewer than 3 candidates are kept as
    they are. min_keep is 1 here, as in llama.cpp's own tests (test_tfs): with the server's
    min_keep = 0 a small z can leave no candidate and llama.cpp aborts in the draw. Runs a
    full sort of the vocab (eta.sort_desc); the cut is applied as a per-row top-k.
    """

    z: float
    name = "tail-free"

    def __post_init__(self):
        object.__setattr__(self, "z", check_unit(self.z, "tail_free", "z", zero=True, off="1"))

    @property
    def off(self) -> bool:
        return self.z >= 1.0

    def keep(self, x, states):
        return keep_all(x) if self.off or x.shape[-1] <= 2 else tail_free_mask(x, self.z)


def tail_free_mask(x, z):
    """Traced: tail-free sampling's keep mask (`z` a float or f32 [rows] per-row data; vocab > 2)."""
    V = x.shape[-1]
    p = _probs(x)
    ps = eta.sort_desc(p)[0]
    size = _count(x > NEG_INF)
    d1 = eta.slice_last(ps, 0, V - 1) - eta.slice_last(ps, 1, V - 1)
    d2 = eta.abs_(eta.slice_last(d1, 0, V - 2) - eta.slice_last(d1, 1, V - 2))
    idx = eta.broadcast(eta.cast(eta.iota(V - 2), dtype.i32), d2.shape)
    valid = idx < keep_dims(size - 2, d2)
    d2 = eta.select(valid, d2, 0.0)
    total = eta.reduce_sum(d2)
    uniform = 1.0 / eta.cast(eta.maximum(size - 2, 1), dtype.f32)
    norm = eta.select(keep_dims(total > 1e-6, d2), d2 / keep_dims(eta.select(total > 1e-6, total, 1.0), d2),
                      eta.select(valid, keep_dims(uniform, d2), 0.0))
    cum = eta.cumsum(norm)
    zz = per_row(z, cum)
    cand = eta.and_(valid, idx >= 1)
    past = _count(eta.and_(cand, cum > zz))
    below = _count(eta.and_(cand, eta.not_(cum > zz)))
    k = eta.select(past > 0, below + 1, size)
    k = eta.select(size <= 2, V, k)
    return eta.top_k_mask(p, k)


@dataclass(frozen=True)
class MirostatV1(Mirostat):
    """Mirostat v1 (Basu et al. 2021): a top-k whose k follows from a Zipf fit of the top m probabilities and mu.

    llama.cpp's llama_sampler_mirostat_apply: s_hat = sum(t_i b_i) / sum(t_i^2) over the first
    m - 1 adjacent pairs of the sorted probabilities (t_i = log((i+2)/(i+1)), b_i = log(p_i/p_{i+1})),
    k = (eps * 2^mu / (1 - N^-eps))^(1/s_hat) with eps = s_hat - 1 and N the vocab size, then top-k
    with max(int(k), 1), and after the draw mu -= eta * (surprise - tau) as in Mirostat v2
    (mu starts at 2 * tau and lives in a device channel). Differences: pairs reach only tokens of
    non-zero probability (llama.cpp takes log(p/0) = inf there, which makes k = 1); a k that is
    NaN or beyond the vocab keeps every token (llama.cpp's int(k) of such a float is undefined).
    """

    m: int = 100
    name = "mirostat-v1"

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.m, bool) or not isinstance(self.m, int) or self.m < 2:
            raise ValidationError(f"mirostat_v1: m (tokens used to estimate s_hat) must be an int >= 2, got "
                                  f"{self.m!r}. Fix: pass 100 (llama.cpp's value)")

    def keep(self, x, states):
        V = x.shape[-1]
        lead = x.shape[:-1]
        mu = states["mirostat_mu"]
        mu = eta.broadcast(eta.reshape(mu, mu.shape[:-1]), lead)
        p = _probs(x)
        M = min(self.m, V)
        if M < 2:
            return keep_all(x)
        top = eta.top_k(p, M)[0]
        size = _count(p > 0.0)
        i = eta.cast(eta.iota(M - 1), dtype.f32)
        t = eta.broadcast(eta.log((i + 2.0) / (i + 1.0)), lead + (M - 1,))
        a, b = eta.slice_last(top, 0, M - 1), eta.slice_last(top, 1, M - 1)
        valid = eta.cast(eta.iota(M - 1), dtype.i32) < keep_dims(size - 1, t)
        bi = eta.log(eta.select(valid, a, 1.0) / eta.select(valid, b, 1.0))
        s_hat = eta.reduce_sum(eta.select(valid, t * bi, 0.0)) / eta.reduce_sum(eta.select(valid, t * t, 0.0))
        e = s_hat - 1.0
        base = e * eta.exp(mu * math.log(2.0)) / (1.0 - eta.exp(eta.neg(e) * math.log(V)))
        k = eta.exp(eta.log(base) / s_hat)
        k = eta.select(eta.isnan(k), float(V), eta.minimum(eta.maximum(k, 1.0), float(V)))
        return eta.top_k_mask(x, eta.cast(eta.floor(k), dtype.i32))


@dataclass(frozen=True)
class LogitBias(Processor):
    """Add a bias to chosen tokens' logits ({token_id: bias}; -inf bans a token); {} is off.

    llama.cpp's llama_sampler_logit_bias_apply, first in its chain. The biases are device data:
    a f32[vocab] state channel filled when decoding starts, so samplers that differ only in
    their biases trace the same program (Sampler.trace_key ignores the values). Differences:
    a token id outside the vocab is a ValidationError (llama.cpp skips it), and +inf or NaN
    biases are refused (use a large finite bias to force a token).
    """

    bias: object = ()
    name = "logit-bias"

    def __post_init__(self):
        items = self.bias.items() if isinstance(self.bias, dict) else self.bias
        try:
            items = list(items)
        except TypeError:
            raise ValidationError(f"logit_bias: pass a mapping {{token_id: bias}}, got {self.bias!r}") from None
        acc: dict = {}
        for item in items:
            try:
                tok, b = item
            except (TypeError, ValueError):
                raise ValidationError(f"logit_bias: {item!r} is not a (token_id, bias) pair. "
                                      "Fix: pass {token_id: bias}") from None
            if isinstance(tok, str) and tok.strip().lstrip("+").isdigit():
                tok = int(tok)  # JSON object keys are strings
            if isinstance(tok, bool) or not isinstance(tok, (int, np.integer)) or tok < 0:
                raise ValidationError(f"logit_bias: token ids must be ints >= 0, got {tok!r}. "
                                      "Fix: use the id from the tokenizer")
            try:
                bf = float(b)
            except (TypeError, ValueError):
                bf = float("nan")
            if math.isnan(bf) or bf == float("inf"):
                raise ValidationError(f"logit_bias: the bias of token {int(tok)} must be a finite number or -inf "
                                      f"(ban), got {b!r}. Fix: use a large finite bias such as 100 to force it")
            acc[int(tok)] = acc.get(int(tok), 0.0) + bf  # repeated ids add up, as in llama.cpp
        object.__setattr__(self, "bias", tuple(sorted(acc.items())))

    @property
    def off(self) -> bool:
        return not self.bias

    @property
    def mapping(self) -> dict:
        """{token_id: bias}."""
        return dict(self.bias)

    def trace_key(self):
        return ("logit-bias",)

    def states(self, vocab):
        return (StateSpec("logit_bias", (vocab,), dtype.f32),)

    def initial(self, ctx):
        dense = np.zeros(ctx.vocab, np.float32)
        for tok, b in self.bias:
            if tok >= ctx.vocab:
                raise ValidationError(f"logit_bias: token id {tok} is outside the vocab (size {ctx.vocab}). "
                                      f"Fix: use ids in [0, {ctx.vocab})")
            dense[tok] = b
        return {"logit_bias": dense}

    def apply(self, x, states):
        b = states["logit_bias"]
        return eta.select(eta.eq(b, NEG_INF), NEG_INF, x + b)  # a ban stays -inf even for a +inf logit

    def update(self, states, token, final):
        return {"logit_bias": states["logit_bias"] + 0.0}
