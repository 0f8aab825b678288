"""Building samplers: one constructor per sampler, chain(), and from_spec() for names and keyword options."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ValidationError
from .chain import Sampler
from .dry import DRY
from .llamacpp import XTC, DynamicTemperature, LogitBias, MirostatV1, TailFree, TopNSigma
from .penalties import Penalties
from .state import Truncation, check_temperature
from .truncations import EpsilonCutoff, EtaCutoff, MinP, Mirostat, PLess, TopA, TopK, TopP, Typical


def greedy() -> Sampler:
    """Always the most likely token (ties -> lowest id)."""
    return Sampler(0.0)


def temperature(t: float = 1.0) -> Sampler:
    """Sample from softmax(logits / t)."""
    return Sampler(t)


def top_k(k: int = 40, temperature: float = 1.0) -> Sampler:
    """Sample among the k most likely tokens."""
    return Sampler(temperature, (TopK(k),))


def top_p(p: float = 0.9, temperature: float = 1.0) -> Sampler:
    """Nucleus sampling: the smallest prefix of the sorted distribution with mass >= p."""
    return Sampler(temperature, (TopP(p),))


def min_p(p: float = 0.05, temperature: float = 1.0) -> Sampler:
    """Keep tokens with prob >= p * max_prob."""
    return Sampler(temperature, (MinP(p),))


def p_less(temperature: float = 1.0) -> Sampler:
    """p-less: keep tokens with prob >= sum of squared probs (llama.cpp's p_less; no parameter)."""
    return Sampler(temperature, (PLess(),))


def top_a(a: float = 0.2, temperature: float = 1.0) -> Sampler:
    """Keep tokens with prob >= a * max_prob^2."""
    return Sampler(temperature, (TopA(a),))


def typical(mass: float = 0.95, temperature: float = 1.0) -> Sampler:
    """Locally typical sampling with probability mass `mass`."""
    return Sampler(temperature, (Typical(mass),))


def epsilon_cutoff(epsilon: float = 3e-4, temperature: float = 1.0) -> Sampler:
    """Truncate tokens with prob < epsilon."""
    return Sampler(temperature, (EpsilonCutoff(epsilon),))


def eta_cutoff(eta: float = 3e-4, temperature: float = 1.0) -> Sampler:
    """Truncate tokens with prob < min(eta, sqrt(eta) * exp(-entropy))."""
    return Sampler(temperature, (EtaCutoff(eta),))


def mirostat(tau: float = 5.0, eta: float = 0.1, temperature: float = 1.0) -> Sampler:
    """Mirostat v2 with target surprise tau (bits) and learning rate eta; mu is kept on the device."""
    return Sampler(temperature, (Mirostat(tau, eta),))


def chain(*parts, temperature: float = 1.0) -> Sampler:
    """A sampler from stages and/or samplers, in order (their temperatures are ignored; pass `temperature`)."""
    s = Sampler(temperature)
    for part in parts:
        if isinstance(part, Sampler):
            s = s.then(*part.processors, *part.truncations)
        else:
            s = s.then(part)
    return s


# name -> (stage class, default parameter); the value of from_spec(..., value=) overrides the default
TRUNCATIONS = {"top-k": (TopK, 40), "top-p": (TopP, 0.9), "min-p": (MinP, 0.05), "top-a": (TopA, 0.2),
               "p-less": (PLess, True), "typical": (Typical, 0.95), "epsilon-cutoff": (EpsilonCutoff, 3e-4),
               "eta-cutoff": (EtaCutoff, 3e-4), "mirostat": (Mirostat, 5.0)}
NAMES = ("greedy", "temperature") + tuple(TRUNCATIONS)
# the stages only keyword options add (two parameters, or no named sampler of their own)
EXTRA_STAGES = {"top-n-sigma": TopNSigma, "tail-free": TailFree, "xtc": XTC,
                "dynamic-temperature": DynamicTemperature, "mirostat-v1": MirostatV1}
# keyword options of from_spec/generate that add a truncation, in the order they apply: HF's warper
# order for the first wave; llama.cpp's default chain (penalties, dry, top_n_sigma, top_k, [tfs_z],
# typ_p, top_p, min_p, xtc, temperature) places the new stages: top-n-sigma first, tail-free after
# top-k, XTC after the cutoffs, the dynamic temperature last, Mirostat (v2 or v1) after everything
OPTION_ORDER = (("top_n_sigma", "top-n-sigma"), ("top_k", "top-k"), ("tfs_z", "tail-free"), ("top_p", "top-p"),
                ("min_p", "min-p"), ("p_less", "p-less"), ("top_a", "top-a"), ("typical", "typical"),
                ("epsilon_cutoff", "epsilon-cutoff"),
                ("eta_cutoff", "eta-cutoff"), ("xtc_probability", "xtc"), ("dynatemp_range", "dynamic-temperature"),
                ("mirostat", "mirostat"), ("mirostat_v1", "mirostat-v1"))
# options that only qualify another: {option: the option it needs}
SECONDARY = {"mirostat_eta": ("mirostat", "mirostat_v1"), "mirostat_m": ("mirostat_v1",),
             "xtc_threshold": ("xtc_probability",), "dynatemp_exponent": ("dynatemp_range",),
             "dry_base": ("dry_multiplier",), "dry_allowed_length": ("dry_multiplier",),
             "dry_penalty_last_n": ("dry_multiplier",), "dry_sequence_breakers": ("dry_multiplier",)}
# DRY's options (a processor, after the penalties as in llama.cpp's chain); the rest default to llama.cpp's
DRY_OPTIONS = ("dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers")
OPTIONS = tuple(k for k, _ in OPTION_ORDER) + ("mirostat_eta", "mirostat_m", "xtc_threshold", "dynatemp_exponent",
                                                "repetition_penalty", "presence_penalty", "frequency_penalty",
                                                "logit_bias", "samplers") + DRY_OPTIONS
# llama.cpp's --samplers names (and piegpu's) -> the option whose stage they place; None: accepted, nothing to place
SAMPLER_ORDER_NAMES = {
    "top_n_sigma": "top_n_sigma", "top-n-sigma": "top_n_sigma", "top_k": "top_k", "top-k": "top_k",
    "tfs_z": "tfs_z", "tfs": "tfs_z", "tail-free": "tfs_z", "top_p": "top_p", "top-p": "top_p",
    "nucleus": "top_p", "min_p": "min_p", "min-p": "min_p",
    "p_less": "p_less", "p-less": "p_less", "top_a": "top_a", "top-a": "top_a",
    "typ_p": "typical", "typical_p": "typical", "typical": "typical", "epsilon_cutoff": "epsilon_cutoff",
    "eta_cutoff": "eta_cutoff", "xtc": "xtc_probability", "temperature": "dynatemp_range",
    "temp": "dynatemp_range", "mirostat": "mirostat", "mirostat_v1": "mirostat_v1",
    "penalties": None, "dry": None, "logit_bias": None,
}


def _stage(name: str, value, extra: dict) -> Truncation:
    if name in EXTRA_STAGES:
        cls = EXTRA_STAGES[name]
        if cls is XTC:
            return XTC(value, extra.get("xtc_threshold", 0.1))
        if cls is DynamicTemperature:
            return DynamicTemperature(extra["temperature"], value, extra.get("dynatemp_exponent", 1.0))
        if cls is MirostatV1:
            return MirostatV1(5.0 if value is None else value, extra.get("mirostat_eta", 0.1),
                              extra.get("mirostat_m", 100))
        return cls(value)
    cls, default = TRUNCATIONS[name]
    v = default if value is None else value
    if cls is TopK:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        return TopK(v)
    if cls is Mirostat:
        return Mirostat(v, extra.get("mirostat_eta", 0.1))
    return cls(v)


def sampler_order(samplers) -> tuple:
    """The option keys, in the order given by llama.cpp-style sampler names ("top_k;top_p;xtc" or a list)."""
    names = samplers.replace(",", ";").split(";") if isinstance(samplers, str) else list(samplers)
    keys = []
    for n in names:
        n = str(n).strip().lower()
        if not n:
            continue
        if n not in SAMPLER_ORDER_NAMES:
            raise ValidationError(f"samplers: unknown sampler {n!r}. Fix: use names from "
                                  f"{sorted(SAMPLER_ORDER_NAMES)}, e.g. 'top_k;top_p;min_p;xtc;temperature'")
        key = SAMPLER_ORDER_NAMES[n]
        if key is not None and key not in keys:
            keys.append(key)
    return tuple(keys)


def from_spec(spec=None, temperature: float = 1.0, value: float | None = None, **options) -> Sampler:
    """A Sampler from a Sampler, or a name in NAMES, plus keyword options (top_k=, typical=, mirostat=, penalties...).

    Truncation options add stages in OPTION_ORDER; with a truncation option the default
    "greedy" samples (at `temperature`), also at the option's off value (top_p=1 is plain
    sampling, as in vLLM and llama.cpp); temperature 0 is always greedy. The option of the
    named sampler itself (sampler="top-p", top_p=0.5) is its parameter, like `value`.
    Off values (top_k=0, top_p=1, min_p=0, typical=1, repetition_penalty=1, top_n_sigma=0, tfs_z=1,
    xtc_probability=0, dynatemp_range=0, logit_bias={}, ...) add no stage.

    llama.cpp's options: top_n_sigma, tfs_z, xtc_probability + xtc_threshold (0.1),
    dynatemp_range + dynatemp_exponent (1.0) around `temperature`, mirostat_v1=TAU (with
    mirostat_eta and mirostat_m, 100), logit_bias={token_id: bias}, and samplers= the order of
    the truncations as llama.cpp's --samplers names ("top_k;top_p;min_p;xtc;temperature"); a
    stage option whose name the order leaves out is an error. DRY: dry_multiplier (0 = off) with
    dry_base (1.75), dry_allowed_length (2), dry_penalty_last_n (-1) and dry_sequence_breakers
    (newline, ':', '"', '*'); it runs after the penalties, as in llama.cpp's default chain.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValidationError(f"unknown sampler options {unknown}. Fix: use {list(OPTIONS)}")
    opts = {k: v for k, v in options.items() if v is not None}
    miro_eta = opts.get("mirostat_eta")
    if miro_eta is not None and "mirostat" not in opts and "mirostat_v1" not in opts and not (
            isinstance(spec, str) and spec.replace("_", "-") == "mirostat") and not (
            isinstance(spec, Sampler) and any(isinstance(t, Mirostat) for t in spec.truncations)):
        raise ValidationError("mirostat_eta is set but no Mirostat sampler is. Fix: add mirostat=TAU")
    for key, needs in SECONDARY.items():
        if key != "mirostat_eta" and key in opts and not any(n in opts for n in needs):
            raise ValidationError(f"{key} is set but {needs[0]} is not. Fix: add {needs[0]}=... or drop {key}")
    dry_args = {k[4:]: opts.pop(k) for k in DRY_OPTIONS if k in opts}
    dry = DRY(**{"sequence_breakers" if k == "sequence_breakers" else k: v for k, v in dry_args.items()})
    extra_args = {k: opts.pop(k) for k in list(SECONDARY) if k in opts}
    extra_args["temperature"] = temperature
    bias = LogitBias(opts.pop("logit_bias", ()))
    order = [k for k, _ in OPTION_ORDER]
    if "samplers" in opts:
        order = list(sampler_order(opts.pop("samplers")))
        left = [k for k, _ in OPTION_ORDER if k in opts and k not in order]
        if left:
            raise ValidationError(f"samplers: {left} are set but not in the sampler order. Fix: add them to "
                                  f"samplers (e.g. '{';'.join(order + left)}') or drop them")
        order += [k for k, _ in OPTION_ORDER if k not in order]
    named = spec.replace("_", "-") if isinstance(spec, str) else None
    own = next((key for key, name in OPTION_ORDER if name == named), None)
    if own in opts:
        if value is not None and value != opts[own]:
            raise ValidationError(f"sampler {named!r} got its parameter twice: value={value!r} and "
                                  f"{own}={opts[own]!r}. Fix: pass one of them")
        value = opts.pop(own)
    pen = Penalties(opts.pop("repetition_penalty", 1.0), opts.pop("presence_penalty", 0.0),
                    opts.pop("frequency_penalty", 0.0))
    names = dict(OPTION_ORDER)
    extra = [_stage(names[key], opts[key], extra_args) for key in order if key in opts]
    if isinstance(spec, Sampler):
        base = spec
    else:
        name = "greedy" if spec is None else str(spec).replace("_", "-")
        if name not in NAMES:
            raise ValidationError(f"unknown sampler {spec!r}. Fix: one of {list(NAMES)}")
        t = check_temperature(temperature)
        if name == "greedy":
            base = Sampler(0.0 if not extra else t)
        elif name == "temperature":
            base = Sampler(t)
        else:
            base = Sampler(t, (_stage(name, value, extra_args),))
        if t == 0.0:
            base = Sampler(0.0)
    s = base.then(*extra) if extra and not base.greedy else base
    if not dry.off:
        s = s.with_dry(dry)
    if pen.active:
        s = s.with_penalties(pen.repetition, pen.presence, pen.frequency)
    if not bias.off:
        s = replace(s, processors=(bias,) + tuple(p for p in s.processors if not isinstance(p, LogitBias)))
    return s
