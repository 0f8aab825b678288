"""Samplers as device epilogues: composable chains traced into the pass that produced the logits.

A Sampler is a chain, applied along the last axis of the logits:

    sanitize (NaN -> -inf) -> [grammar mask] -> processors (logit bias, penalties, DRY, watermark, ...)
    -> temperature -> truncations (top-n-sigma, top-k, tail-free, top-p, min-p, p-less, top-a, typical, epsilon,
       eta, XTC, dynamic temperature, Mirostat v2 or v1) -> Gumbel-max draw (argmax when the temperature is 0)

The llama.cpp stages (XTC, TopNSigma, DynamicTemperature, TailFree, MirostatV1, LogitBias) are in
llamacpp.py, DRY in dry.py, with where they differ from llama.cpp's src/llama-sampling.cpp.

Stages that remember something between passes (seen-token counts, Mirostat's mu, the
RNG state [key, counter]) declare it as StateSpecs. A decode loop keeps each state in
a device channel (SamplerStates) that the epilogue takes and puts every pass, so the
state is loop-carried on the device and never crosses to the host.
"""

from ..dtypes import dtype
from .chain import RNG_STATE, Sampler, SamplerStates, rng_advance
from .dry import DRY
from .llamacpp import XTC, DynamicTemperature, LogitBias, MirostatV1, TailFree, TopNSigma
from .penalties import Penalties
from .spec import (NAMES, OPTION_ORDER, OPTIONS, TRUNCATIONS, chain, epsilon_cutoff, eta_cutoff, from_spec, greedy,
                   min_p, mirostat, p_less, temperature, top_a, top_k, top_p, typical)
from .state import Processor, SeqContext, Stage, StateSpec, Truncation
from .truncations import EpsilonCutoff, EtaCutoff, MinP, Mirostat, PLess, TopA, TopK, TopP, Typical

__all__ = ["Sampler", "Stage", "Processor", "Truncation", "StateSpec", "SeqContext", "SamplerStates", "TopK", "TopP",
           "MinP", "PLess",
           "TopA", "Typical", "EpsilonCutoff", "EtaCutoff", "Mirostat", "Penalties", "XTC", "TopNSigma",
           "DynamicTemperature", "TailFree", "MirostatV1", "LogitBias", "DRY", "greedy", "temperature",
           "top_k", "top_p", "min_p", "p_less", "top_a", "typical", "epsilon_cutoff", "eta_cutoff", "mirostat", "chain",
           "from_spec", "rng_advance", "NAMES", "OPTIONS", "OPTION_ORDER", "TRUNCATIONS", "RNG_STATE", "dtype"]
