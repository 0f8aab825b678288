"""Building samplers: one constructor per sampler, chain(), and from_spec() for names and keyword options."""

from __future__ import annotations

from ..errors import ValidationError
from .chain import Sampler
from .penalties import Penalties
from .state import Truncation, check_temperature
from .truncations import EpsilonCutoff, EtaCutoff, MinP, Mirostat, TopA, TopK, TopP, Typical


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
               "typical": (Typical, 0.95), "epsilon-cutoff": (EpsilonCutoff, 3e-4),
               "eta-cutoff": (EtaCutoff, 3e-4), "mirostat": (Mirostat, 5.0)}
NAMES = ("greedy", "temperature") + tuple(TRUNCATIONS)
# keyword options of from_spec/generate that add a truncation, in the order they apply (HF's warper order)
OPTION_ORDER = (("top_k", "top-k"), ("top_p", "top-p"), ("min_p", "min-p"), ("top_a", "top-a"),
                ("typical", "typical"), ("epsilon_cutoff", "epsilon-cutoff"), ("eta_cutoff", "eta-cutoff"),
                ("mirostat", "mirostat"))
OPTIONS = tuple(k for k, _ in OPTION_ORDER) + ("mirostat_eta", "repetition_penalty", "presence_penalty",
                                                "frequency_penalty")


def _stage(name: str, value, mirostat_eta: float | None = None) -> Truncation:
    cls, default = TRUNCATIONS[name]
    v = default if value is None else value
    if cls is TopK:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        return TopK(v)
    if cls is Mirostat:
        return Mirostat(v, 0.1 if mirostat_eta is None else mirostat_eta)
    return cls(v)


def from_spec(spec=None, temperature: float = 1.0, value: float | None = None, **options) -> Sampler:
    """A Sampler from a Sampler, or a name in NAMES, plus keyword options (top_k=, typical=, mirostat=, penalties...).

    Truncation options add stages in OPTION_ORDER; with a truncation option the default
    "greedy" samples (at `temperature`), also at the option's off value (top_p=1 is plain
    sampling, as in vLLM and llama.cpp); temperature 0 is always greedy. The option of the
    named sampler itself (sampler="top-p", top_p=0.5) is its parameter, like `value`.
    Off values (top_k=0, top_p=1, min_p=0, typical=1, repetition_penalty=1, ...) add no stage.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValidationError(f"unknown sampler options {unknown}. Fix: use {list(OPTIONS)}")
    opts = {k: v for k, v in options.items() if v is not None}
    miro_eta = opts.pop("mirostat_eta", None)
    if miro_eta is not None and "mirostat" not in opts and not (
            isinstance(spec, str) and spec.replace("_", "-") == "mirostat") and not (
            isinstance(spec, Sampler) and any(isinstance(t, Mirostat) for t in spec.truncations)):
        raise ValidationError("mirostat_eta is set but no Mirostat sampler is. Fix: add mirostat=TAU")
    named = spec.replace("_", "-") if isinstance(spec, str) else None
    own = next((key for key, name in OPTION_ORDER if name == named), None)
    if own in opts:
        if value is not None and value != opts[own]:
            raise ValidationError(f"sampler {named!r} got its parameter twice: value={value!r} and "
                                  f"{own}={opts[own]!r}. Fix: pass one of them")
        value = opts.pop(own)
    pen = Penalties(opts.pop("repetition_penalty", 1.0), opts.pop("presence_penalty", 0.0),
                    opts.pop("frequency_penalty", 0.0))
    extra = [_stage(name, opts[key], miro_eta) for key, name in OPTION_ORDER if key in opts]
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
            base = Sampler(t, (_stage(name, value, miro_eta),))
        if t == 0.0:
            base = Sampler(0.0)
    s = base.then(*extra) if extra and not base.greedy else base
    if pen.active:
        s = s.with_penalties(pen.repetition, pen.presence, pen.frequency)
    return s
