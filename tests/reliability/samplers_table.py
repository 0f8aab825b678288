"""Non-finite logits into every sampler of piegpu.samplers: the cases, the programs, the documented results.

Each sampler is traced as a plain eta program (logits and its device states as inputs,
the token as output), so the same program runs on the interpreter and on every backend.
The interpreter's tokens are the documented results (docs/errors.md); the tests check
that every backend returns the same token and that no token is ever outside [0, vocab).
"""

from __future__ import annotations

import numpy as np

from piegpu import dtype, eta, samplers

V = 40
TEMPERATURE = 0.7
_base = np.linspace(-2.0, 2.0, V).astype(np.float32)  # finite logits, largest at the last index


def _set(pairs) -> np.ndarray:
    x = _base.copy()
    for idx, v in pairs:
        x[idx] = v
    return x


NAN, INF = np.float32(np.nan), np.float32(np.inf)
LOGITS = {
    "all NaN": np.full(V, NAN, np.float32),
    "all -inf": np.full(V, -INF, np.float32),
    "all +inf": np.full(V, INF, np.float32),
    "NaN at even ids": _set([(slice(0, V, 2), NAN)]),
    "NaN at the max (id 39)": _set([(V - 1, NAN)]),
    "+inf at id 7": _set([(7, INF)]),
    "+inf at id 7, NaN at 10..19": _set([(7, INF), (slice(10, 20), NAN)]),
    "-inf except id 13": _set([(slice(0, V), -INF), (13, 0.5)]),
    "-inf and NaN only": _set([(slice(0, V, 2), -INF), (slice(1, V, 2), NAN)]),
    "3e38 at id 3 (overflows / T)": _set([(3, 3e38)]),
    "all 3e38": np.full(V, 3e38, np.float32),
    "only subnormals": np.full(V, 1e-45, np.float32),
}


def sampler_names() -> list:
    """Every sampler name piegpu.samplers offers."""
    names = getattr(samplers, "NAMES", None)
    return list(names) if names else ["greedy", "temperature", "top-k", "top-p", "min-p", "top-a"]


def make(name: str):
    """The sampler `name` at TEMPERATURE (greedy ignores it)."""
    return samplers.from_spec(name, temperature=TEMPERATURE)


def program(sampler):
    """(program, input values after the logits) computing the sampler's token for V logits."""
    if hasattr(sampler, "states") and hasattr(sampler, "initial"):
        specs = list(sampler.states(V))
        ctx = samplers.SeqContext((1, 2, 3), V, 7)
        init = sampler.initial(ctx)
        values = [np.asarray(init[s.name]).astype(s.dtype.np).reshape(s.shape) for s in specs]

        def fn(logits, *states):
            token, _ = sampler.step(logits, {s.name: t for s, t in zip(specs, states)})
            return eta.cast(token, dtype.i32)
        prog = eta.trace(fn, eta.spec([V], dtype.f32), *[eta.spec(list(s.shape), s.dtype) for s in specs])
        return prog, values
    needs = getattr(sampler, "needs_rng", False)  # the older one-state API
    prog = eta.trace(lambda x, s: eta.cast(sampler.sample(x, s if needs else None), dtype.i32),
                     eta.spec([V], dtype.f32), eta.spec([2], dtype.u32))
    return prog, [np.array([7, 0], np.uint32)]


def results(backend: str = "interp") -> dict:
    """{sampler name: {case: token}} on `backend`."""
    out = {}
    for name in sampler_names():
        prog, extra = program(make(name))
        out[name] = {case: int(prog.run(x, *extra, backend=backend)) for case, x in LOGITS.items()}
    return out


def markdown() -> str:
    """The documented results as a markdown section."""
    res = results("interp")
    cases = list(LOGITS)
    lines = ["## non-finite logits into every sampler", "",
             f"The token each sampler of `piegpu.samplers` returns (vocab {V}, temperature {TEMPERATURE}, seed 7;",
             "finite logits rise linearly from -2 at id 0 to 2 at id 39). NaN counts as -inf; when nothing is",
             "finite the token is 0. Every backend (wgsl, spirv, stablehlo) returns the same tokens",
             "(`tests/reliability/test_samplers_nonfinite.py`).", "",
             "| logits | " + " | ".join(res) + " |", "|---|" + "---|" * len(res)]
    for case in cases:
        lines.append(f"| {case} | " + " | ".join(str(res[n][case]) for n in res) + " |")
    return "\n".join(lines) + "\n"
