"""Encoder models (BERT, RoBERTa / XLM-RoBERTa): their config.json and sentence-transformers' pooling config.

An encoder is read from a transformers directory (config.json + safetensors); what it outputs
is set by sentence-transformers' files where the directory has them (modules.json,
1_Pooling/config.json, a Normalize module, sentence_bert_config.json's max_seq_length), else by
the architecture: a *ForSequenceClassification checkpoint is a reranker (its head scores a pair),
a bare encoder has no pooling until the caller names one (embed(pooling=...)).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ModelError

# architectures -> (family, head): "bert" post-LayerNorm blocks with absolute positions (RoBERTa's start after its
# padding id); head "classifier": BERT's pooler (dense + tanh on [CLS]) then a linear; "roberta": dense + tanh on
# <s> then out_proj (transformers' RobertaClassificationHead)
ARCHITECTURES = {
    "BertModel": ("bert", None), "BertForMaskedLM": ("bert", None), "BertForPreTraining": ("bert", None),
    "BertForSequenceClassification": ("bert", "classifier"),
    "RobertaModel": ("roberta", None), "RobertaForMaskedLM": ("roberta", None),
    "RobertaForSequenceClassification": ("roberta", "roberta"),
    "XLMRobertaModel": ("roberta", None), "XLMRobertaForMaskedLM": ("roberta", None),
    "XLMRobertaForSequenceClassification": ("roberta", "roberta"),
}
ENCODER_TYPES = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta"}  # model_type -> family
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
POOLINGS = ("mean", "cls", "last", "max", "mean_sqrt_len", "weightedmean")  # what embed(pooling=...) and 1_Pooling/config.json may name


@dataclass(frozen=True)
class Pooling:
    """How token rows become one vector: `mode` (mean, cls, last, max), then L2-normalized where `normalize`."""

    mode: str
    normalize: bool = False
    include_prompt: bool = True

    @staticmethod
    def named(mode: str, normalize: bool = False) -> "Pooling":
        """A Pooling by name, checked."""
        if mode not in POOLINGS:
            raise ModelError(f"pooling {mode!r} is not one of {', '.join(POOLINGS)}")
        return Pooling(mode, normalize)


@dataclass(frozen=True)
class EncoderConfig:
    """The shape of an encoder and what its checkpoint says about pooling and scoring."""

    family: str  # "bert" or "roberta"
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    act: str = "gelu"
    position_offset: int = 0  # RoBERTa: positions start at padding id + 1
    head: str | None = None  # a reranker's scoring head (ARCHITECTURES)
    num_labels: int = 1
    pooling: Pooling | None = None  # sentence-transformers' pooling, or None (embed(pooling=...) names one)
    max_seq_length: int | None = None  # sentence-transformers' truncation length (None: the positions)
    architecture: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def head_dim(self) -> int:
        """Dimensions per attention head."""
        return self.hidden_size // self.num_attention_heads

    @property
    def rms_norm_eps(self) -> float:
        """The norm epsilon (the name the shared matvec plumbing reads)."""
        return self.layer_norm_eps

    @property
    def max_tokens(self) -> int:
        """The most tokens one text may have: sentence-transformers' max_seq_length, else the positions."""
        positions = self.max_position_embeddings - self.position_offset
        return min(positions, self.max_seq_length) if self.max_seq_length else positions

    @staticmethod
    def from_dir(path: str | Path) -> "EncoderConfig":
        """The EncoderConfig of a transformers directory (config.json, and sentence-transformers' files if any)."""
        path = Path(path)
        raw = _read_json(path / "config.json")
        family, head = _family(raw, path)
        get = raw.get
        hidden, heads = int(get("hidden_size", 768)), int(get("num_attention_heads", 12))
        inter = int(get("intermediate_size", 4 * hidden))
        act = ACTIVATIONS.get(get("hidden_act", "gelu"))
        if act is None:
            raise ModelError(f"{path / 'config.json'}: hidden_act {get('hidden_act')!r} is not supported; piegpu "
                             f"runs {', '.join(ACTIVATIONS)}")
        if get("position_embedding_type", "absolute") != "absolute":
            raise ModelError(f"{path / 'config.json'}: position_embedding_type {get('position_embedding_type')!r}: "
                             "piegpu's BERT runs absolute positions only")
        if hidden % 32 or inter % 32 or hidden % heads or (hidden // heads) % 4:
            raise ModelError(f"{path / 'config.json'}: hidden_size {hidden} / intermediate_size {inter} must be "
                             f"multiples of 32 and the head size ({hidden}/{heads}) a multiple of 4 on piegpu's GPU path")
        labels = len(get("id2label") or {}) or int(get("num_labels", 1) or 1)
        pooling, max_len = sentence_transformers_config(path)
        return EncoderConfig(
            family=family, vocab_size=int(get("vocab_size")), hidden_size=hidden,
            num_hidden_layers=int(get("num_hidden_layers", 12)), num_attention_heads=heads, intermediate_size=inter,
            max_position_embeddings=int(get("max_position_embeddings", 512)),
            type_vocab_size=int(get("type_vocab_size", 2) or 1), layer_norm_eps=float(get("layer_norm_eps", 1e-12)),
            act=act, position_offset=int(get("pad_token_id", 1)) + 1 if family == "roberta" else 0, head=head,
            num_labels=labels, pooling=pooling, max_seq_length=max_len,
            architecture=(get("architectures") or [get("model_type", "")])[0])


def is_encoder_dir(path: Path) -> bool:
    """Whether a model directory holds an encoder this module reads (by config.json's architectures/model_type)."""
    try:
        raw = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    archs = raw.get("architectures") or []
    return any(a in ARCHITECTURES for a in archs) or (not archs and raw.get("model_type") in ENCODER_TYPES)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ModelError(f"{path}: cannot read it ({e}). Fix: a transformers model directory has one") from e
    except ValueError as e:
        raise ModelError(f"{path}: not valid JSON ({e})") from e


def _family(raw: dict, path: Path) -> tuple:
    for arch in raw.get("architectures") or []:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    family = ENCODER_TYPES.get(raw.get("model_type"))
    if family is None:
        raise ModelError(f"{path / 'config.json'}: architectures {raw.get('architectures')} / model_type "
                         f"{raw.get('model_type')!r} is not an encoder piegpu reads ({', '.join(ARCHITECTURES)})")
    return family, None


def sentence_transformers_config(path: Path) -> tuple:
    """(Pooling or None, max_seq_length or None) from sentence-transformers' modules.json and its modules' configs."""
    modules_file = path / "modules.json"
    if not modules_file.exists():
        return None, None
    modules = _read_json(modules_file)
    pooling, normalize = None, False
    for m in modules:
        kind = str(m.get("type", ""))
        where = path / m.get("path", "")
        if kind.endswith("Transformer"):
            continue
        if kind.endswith("Pooling"):
            pooling = _pooling(_read_json(where / "config.json"), where)
        elif kind.endswith("Normalize"):
            normalize = True
        else:
            raise ModelError(f"{modules_file}: module {kind!r} ({m.get('path')}) is not supported yet. "
                             "Fix: use a model whose modules are Transformer, Pooling, Normalize")
    cfg = path / "sentence_bert_config.json"
    max_len = _read_json(cfg).get("max_seq_length") if cfg.exists() else None
    if pooling is not None and normalize:
        pooling = Pooling(pooling.mode, True, pooling.include_prompt)
    return pooling, (int(max_len) if max_len else None)


ST_MODES = {"mean": "mean", "cls": "cls", "lasttoken": "last", "max": "max",
            "mean_sqrt_len_tokens": "mean_sqrt_len", "weightedmean": "weightedmean"}  # sentence-transformers' names


def _pooling(cfg: dict, where: Path) -> Pooling:
    """The mode of a 1_Pooling/config.json: `pooling_mode` (sentence-transformers 5+), or exactly one of the older
    pooling_mode_* flags."""
    mode = cfg.get("pooling_mode")
    if mode is None:
        on = [m for m in ST_MODES if cfg.get(f"pooling_mode_{m}_tokens") or cfg.get(f"pooling_mode_{m}_token")
              or cfg.get(f"pooling_mode_{m}")]
        mode = on[0] if len(on) == 1 else on
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if not isinstance(mode, str) or mode not in ST_MODES:
        raise ModelError(f"{where / 'config.json'}: pooling {mode!r} is not one mode piegpu runs "
                         f"({', '.join(ST_MODES)}; several concatenated are not supported)")
    return Pooling(ST_MODES[mode], False, bool(cfg.get("include_prompt", True)))
