"""LoRA adapters read from disk: PEFT folders (adapter_config.json + adapter_model.safetensors) and llama.cpp's
GGUF LoRA (general.type = adapter), checked against the base model they are to run on.

An adapter becomes per layer and projection a pair (A [r, in], B [out, r]) in f32, with the adapter's scaling
(PEFT: lora_alpha / r, or / sqrt(r) with use_rslora, per module through alpha_pattern; GGUF: adapter.lora.alpha /
r, or 1 where alpha is 0, as llama.cpp) folded into B, and q/k rows of B in the GPU's adjacent-pair order (PEFT
files are in HF order; llama.cpp's converter already permuted Llama's). The device adds
adapter_scale * B (A x) to each target projection (model/lora_bank.py, model/lora_steps.py).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ModelError
from .config import LlamaConfig
from .weights import pair_order

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_MODULE = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
_GGUF_TARGETS = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj",
                 "ffn_gate": "gate_proj", "ffn_up": "up_proj", "ffn_down": "down_proj"}
_GGUF_ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
              "Qwen3ForCausalLM": "qwen3", "Gemma3ForCausalLM": "gemma3"}
# PEFT options that change the math and piegpu does not implement (value -> allowed)
_UNSUPPORTED = {"use_dora": (False, None), "modules_to_save": (None, []), "bias": ("none",),
                "layer_replication": (None, []), "lora_bias": (False, None), "use_qalora": (False, None),
                "trainable_token_indices": (None, {}, []), "target_parameters": (None, []),
                "alora_invocation_tokens": (None, []), "use_bdlora": (None, False)}
_PEFT_KEY = re.compile(r"^(?:base_model\.model\.)?(?:model\.)?layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])"
                       r"(?:\.[\w-]+)?\.weight$")


@dataclass(eq=False)
class LoraWeights:
    """An adapter on the host: per layer {target: (A [r, in], B [out, r] with its scaling folded in)}, f32."""

    name: str
    source: str
    rank: int  # the largest rank of any of its modules
    alpha: float
    layers: list = field(default_factory=list)  # [num_hidden_layers] of dict target -> (A, B)

    @property
    def targets(self) -> frozenset:
        """The projections it adapts (q_proj, ..., down_proj) in any layer."""
        return frozenset(t for layer in self.layers for t in layer)

    @property
    def nbytes(self) -> int:
        """Host bytes of its A and B matrices."""
        return sum(a.nbytes + b.nbytes for layer in self.layers for a, b in layer.values())

    def delta(self, layer: int, target: str) -> np.ndarray | None:
        """B A (f32 [out, in], scaling included; q/k rows in GPU order) of one projection, or None if not adapted."""
        ab = self.layers[layer].get(target)
        return None if ab is None else ab[1] @ ab[0]


def target_shapes(c: LlamaConfig) -> dict:
    """target -> (out, in) of the base model's projections."""
    q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    h, i = c.hidden_size, c.intermediate_size
    return {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q), "gate_proj": (i, h),
            "up_proj": (i, h), "down_proj": (h, i)}


def read_adapter(path: str | Path, config: LlamaConfig, name: str | None = None) -> LoraWeights:
    """The adapter at `path` (a PEFT folder, its adapter_config.json, or a GGUF LoRA file), checked against `config`."""
    p = Path(path).expanduser()
    if p.is_file() and p.name == "adapter_config.json":
        p = p.parent
    if p.is_dir():
        return _read_peft(p, config, name or p.name)
    if p.is_file() and p.suffix == ".gguf":
        return _read_gguf(p, config, name or p.stem)
    if not p.exists():
        raise ModelError(f"{path}: no such adapter. Fix: a PEFT folder (adapter_config.json + "
                         "adapter_model.safetensors) or a GGUF LoRA file (.gguf)")
    raise ModelError(f"{path}: not a LoRA adapter. Fix: a PEFT folder (adapter_config.json + "
                     "adapter_model.safetensors) or a GGUF LoRA file (.gguf, general.type = adapter)")


# ---- PEFT -----------------------------------------------------------------------------------------
def _read_peft(d: Path, config: LlamaConfig, name: str) -> LoraWeights:
    from . import safetensors_io as st
    cfg_path = d / "adapter_config.json"
    if not cfg_path.is_file():
        raise ModelError(f"{d}: no adapter_config.json; a PEFT adapter folder holds adapter_config.json and "
                         "adapter_model.safetensors (save_pretrained writes both)")
    try:
        ac = json.loads(cfg_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelError(f"{cfg_path}: not readable JSON ({e}). Fix: the adapter_config.json that PEFT wrote") from e
    src = str(cfg_path)
    if str(ac.get("peft_type", "LORA")).upper() != "LORA":
        raise ModelError(f"{src}: peft_type {ac.get('peft_type')!r} is not LoRA; piegpu applies LoRA adapters only")
    for key, allowed in _UNSUPPORTED.items():
        if key in ac and ac[key] not in allowed:
            raise ModelError(f"{src}: {key} = {ac[key]!r} is not supported (piegpu applies plain LoRA to "
                             f"{', '.join(TARGETS)}). Fix: an adapter trained without {key}")
    weights = d / "adapter_model.safetensors"
    if not weights.is_file():
        extra = " (adapter_model.bin is a pickle: re-save with safe_serialization=True)" \
            if (d / "adapter_model.bin").is_file() else ""
        raise ModelError(f"{d}: no adapter_model.safetensors{extra}")
    r, alpha = int(ac.get("r", 8)), float(ac.get("lora_alpha", 8))
    rslora = bool(ac.get("use_rslora", False))
    pairs: dict = {}
    for key, entry in st.read_header(weights).items():
        arr = st.read_tensor(weights, entry)  # f32, f16 or bf16 on disk: f32 here
        m = _PEFT_KEY.match(key)
        if m is None:
            what = "embedding/lm_head LoRA" if "embed" in key or "lm_head" in key else "a tensor piegpu cannot apply"
            raise ModelError(f"{weights}: {key!r} is {what}; piegpu applies LoRA to {', '.join(TARGETS)} of the "
                             "decoder layers. Fix: an adapter whose target_modules are among those")
        layer, module, target, ab = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        if target not in TARGETS or _MODULE[target] != module:
            raise ModelError(f"{weights}: {key!r} adapts {module}.{target}, which the base model has no projection "
                             f"for; piegpu's targets: {', '.join(TARGETS)}")
        pairs.setdefault((layer, target), {})[ab] = np.asarray(arr, np.float32)

    def scaling(layer: int, target: str, rank: int) -> float:
        a = _pattern(ac.get("alpha_pattern") or {}, f"model.layers.{layer}.{_MODULE[target]}.{target}", alpha)
        want = _pattern(ac.get("rank_pattern") or {}, f"model.layers.{layer}.{_MODULE[target]}.{target}", r)
        if int(want) != rank:
            raise ModelError(f"{weights}: layer {layer} {target} has rank {rank} but adapter_config.json says "
                             f"r = {int(want)}; the files do not belong together")
        return a / math.sqrt(rank) if rslora else a / rank
    return _assemble(name, str(d), config, pairs, scaling, hf_order=True, alpha=alpha)


def _pattern(patterns: dict, module: str, default: float) -> float:
    """PEFT's rank_pattern / alpha_pattern lookup: the first key that matches the end of the module's name."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return float(value)
    return float(default)


# ---- GGUF (llama.cpp's convert_lora_to_gguf) --------------------------------------------------------
def _read_gguf(p: Path, config: LlamaConfig, name: str) -> LoraWeights:
    from .gguf_arch import field, permutes_qk
    from .gguf_file import GgufFile
    reader = GgufFile(p)
    src = str(p)
    kind = field(reader, "general.type", src, None)
    if kind != "adapter":
        raise ModelError(f"{src}: general.type is {kind!r}, not 'adapter': this is a model, not a LoRA. Fix: "
                         "load it with piegpu.load_model, or convert the adapter with llama.cpp's convert_lora_to_gguf")
    if field(reader, "adapter.type", src, "lora") != "lora":
        raise ModelError(f"{src}: adapter.type is {field(reader, 'adapter.type', src)!r}; piegpu applies LoRA only")
    arch = field(reader, "general.architecture", src)
    want = _GGUF_ARCH.get(config.architecture)
    if arch != want:
        raise ModelError(f"{src}: the adapter is for a {arch!r} model but the base model is {config.architecture} "
                         f"({want!r} in GGUF). Fix: an adapter trained on this base model")
    alpha = float(field(reader, "adapter.lora.alpha", src, 0.0))
    pairs: dict = {}
    for t in reader.tensors:
        m = re.match(r"^blk\.(\d+)\.(\w+)\.weight\.lora_([ab])$", t.name)
        if m is None or m.group(2) not in _GGUF_TARGETS:
            raise ModelError(f"{src}: tensor {t.name!r} is not a LoRA of a projection piegpu adapts "
                             f"({', '.join(_GGUF_TARGETS)} of blk.N)")
        pairs.setdefault((int(m.group(1)), _GGUF_TARGETS[m.group(2)]), {})[m.group(3).upper()] = _dequantized(t, src)
    return _assemble(name, src, config, pairs, lambda _l, _t, rank: alpha / rank if alpha else 1.0,
                     hf_order=not permutes_qk(arch), alpha=alpha)


def _dequantized(t, src: str) -> np.ndarray:
    """A GGUF tensor as f32 [rows, cols] (numpy order: ggml's shape reversed)."""
    import gguf
    from gguf.quants import dequantize
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    if len(shape) != 2:
        raise ModelError(f"{src}: tensor {t.name!r} has shape {shape}; a LoRA matrix is 2-D")
    kind = getattr(gguf.GGMLQuantizationType, t.tensor_type.name)
    data = np.ascontiguousarray(t.data)
    if t.tensor_type.name == "F32":
        return data.view(np.float32).reshape(shape).copy()
    if t.tensor_type.name == "F16":
        return data.view(np.float16).reshape(shape).astype(np.float32)
    return np.asarray(dequantize(data.view(np.uint8).reshape(shape[0], -1), kind), np.float32).reshape(shape)


# ---- both --------------------------------------------------------------------------------------------
def _assemble(name: str, source: str, config: LlamaConfig, pairs: dict, scaling, hf_order: bool,
              alpha: float) -> LoraWeights:
    """LoraWeights from {(layer, target): {"A": [r, in], "B": [out, r]}}, every shape checked against the base."""
    if not pairs:
        raise ModelError(f"{source}: the adapter holds no LoRA tensors")
    shapes = target_shapes(config)
    L = config.num_hidden_layers
    layers: list = [dict() for _ in range(L)]
    rank = 0
    for (layer, target), ab in sorted(pairs.items()):
        where = f"{source}: layer {layer} {target}"
        missing = [x for x in "AB" if x not in ab]
        if missing:
            raise ModelError(f"{where}: lora_{missing[0]} is missing (a LoRA needs both A and B); the file is "
                             "incomplete -- save the adapter again")
        if layer >= L:
            raise ModelError(f"{where}: the base model has {L} layers (0..{L - 1}). Fix: an adapter trained on "
                             "this base model")
        A, B = ab["A"], ab["B"]
        out, inp = shapes[target]
        if A.ndim != 2 or B.ndim != 2 or A.shape[0] != B.shape[1]:
            raise ModelError(f"{where}: lora_A {A.shape} and lora_B {B.shape} disagree on the rank (A is [r, in], "
                             "B is [out, r])")
        if A.shape[1] != inp or B.shape[0] != out:
            raise ModelError(f"{where}: the adapter's matrices are [{B.shape[0]} x {A.shape[1]}] but the base "
                             f"model's {target} is [{out} x {inp}]: an adapter for another model size. Fix: an "
                             "adapter trained on this base model")
        r = A.shape[0]
        B = B * np.float32(scaling(layer, target, r))
        if hf_order and target in ("q_proj", "k_proj"):
            B = B[pair_order(out, config.head_dim)]
        layers[layer][target] = (np.ascontiguousarray(A, np.float32), np.ascontiguousarray(B, np.float32))
        rank = max(rank, r)
    return LoraWeights(name, source, rank, alpha, layers)
