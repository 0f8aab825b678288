"""A GGUF's tokenizer (tokenizer.ggml.*) as a `tokenizers.Tokenizer` that encodes as the checkpoint's tokenizer.json.

Two kinds, as llama.cpp stores them:
- "gpt2": byte-level BPE with merges; tokenizer.ggml.pre names the split regex (llama.cpp's
  llama-vocab.cpp): Llama 3 ("llama-bpe", with ignore_merges: a word in the vocabulary is one
  token), Qwen2 ("qwen2", NFC-normalized as its tokenizer.json), SmolLM/StarCoder (digits
  one by one, then GPT-2's regex), GPT-2.
- "llama": SentencePiece BPE (Llama 2, Mistral, Gemma): pieces with scores, no merges. The
  merges are rebuilt from the scores as transformers' converter does from tokenizer.model
  (every split of a piece into two pieces of the vocabulary, ranked by the piece's score),
  with byte fallback to the <0xNN> pieces; spaces become U+2581, with a leading one when
  tokenizer.ggml.add_space_prefix (Llama 2 / Mistral yes, Gemma no).
A tokenizer whose GGUF says add_bos_token puts BOS first, as the checkpoint's tokenizer does.
"""

from __future__ import annotations

from typing import Any, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ..errors import ModelError
from .gguf_metadata import field_contents

# llama.cpp's token types (gguf TokenType)
_TOKEN_NORMAL, _TOKEN_UNKNOWN, _TOKEN_CONTROL, _TOKEN_USER_DEFINED, _TOKEN_UNUSED, _TOKEN_BYTE = 1, 2, 3, 4, 5, 6

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> (split regex, or "digits" (each digit, then GPT-2's regex) or None (GPT-2's regex);
# NFC normalizer; ignore_merges)
BPE_PRES = {
    "llama-bpe": (LLAMA3_SPLIT, False, True), "llama3": (LLAMA3_SPLIT, False, True),
    "qwen2": (QWEN2_SPLIT, True, False),
    **{name: ("digits", False, False) for name in ("smollm", "starcoder", "refact", "codeshell", "exaone", "minerva")},
    **{name: (None, False, False) for name in ("gpt-2", "gpt2", "default")},
}


def _vocab(tokens: Sequence[str]) -> dict:
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ModelError("tokenizer.ggml.tokens has duplicate entries; the GGUF's vocabulary is corrupt -- "
                         "re-download it")
    return vocab


def _add_special(tok: Tokenizer, tokens: Sequence[str], types: Sequence[int] | None) -> None:
    """Control and unknown tokens as special added tokens (as tokenizer.json has <unk>), user-defined ones as
    plain added tokens (never split)."""
    special = (_TOKEN_CONTROL, _TOKEN_UNKNOWN)
    added = [(i, AddedToken(text, special=kind in special, normalized=False))
             for i, (text, kind) in enumerate(zip(tokens, types or ())) if kind in special + (_TOKEN_USER_DEFINED,)]
    tok.add_special_tokens([a for _, a in added if a.special])
    tok.add_tokens([a for _, a in added if not a.special])
    for i, a in added:
        got = tok.token_to_id(a.content)
        if got != i:
            raise ModelError(f"special token {a.content!r} maps to id {got}, expected {i}; the GGUF vocabulary is "
                             "inconsistent -- re-download it")


def _bos_first(tok: Tokenizer, tokens: Sequence[str], bos_id: int | None, then=None) -> None:
    steps = [then] if then is not None else []
    if bos_id is not None:
        if not 0 <= bos_id < len(tokens):
            raise ModelError(f"tokenizer.ggml.bos_token_id = {bos_id} is outside the vocabulary (0..{len(tokens) - 1})")
        bos = tokens[bos_id]
        steps.append(processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                   special_tokens=[(bos, bos_id)]))
    tok.post_processor = processors.Sequence(steps) if len(steps) > 1 else (steps[0] if steps else None)


def build_bpe_tokenizer(tokens: Sequence[str], merges: Sequence[str], token_types: Sequence[int] | None = None,
                        pre: str = "smollm", bos_id: int | None = None) -> Tokenizer:
    """A byte-level BPE from llama.cpp-style vocab metadata (`bos_id`: put that token first)."""
    if pre not in BPE_PRES:
        raise ModelError(f"tokenizer.ggml.pre = {pre!r} is not supported; known byte-level BPE pre-tokenizers: "
                         f"{sorted(BPE_PRES)}")
    split, nfc, ignore_merges = BPE_PRES[pre]
    pairs = []
    for k, merge in enumerate(merges):
        left, sep, right = merge.partition(" ")
        if not sep or not left or not right:
            raise ModelError(f"tokenizer.ggml.merges[{k}] = {merge!r} is not 'left right'; the GGUF is corrupt -- "
                             "re-download it")
        pairs.append((left, right))
    tok = Tokenizer(models.BPE(vocab=_vocab(tokens), merges=pairs, fuse_unk=False, byte_fallback=False,
                               ignore_merges=ignore_merges))
    tok.normalizer = normalizers.NFC() if nfc else None
    if split is None or split == "digits":
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.pre_tokenizer = byte_level if split is None else pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    _add_special(tok, tokens, token_types)
    _bos_first(tok, tokens, bos_id, processors.ByteLevel(trim_offsets=False))
    return tok


def spm_merges(tokens: Sequence[str], scores: Sequence[float]) -> list:
    """BPE merges of a SentencePiece vocabulary: every split of a piece into two pieces, best piece score first.

    The order is transformers' generate_merges': by (score, length of the left part, length of the right
    part), descending, and within one piece by the parts' ids (a stable sort keeps that).
    """
    vocab = _vocab(tokens)
    out = []
    for piece, score in zip(tokens, scores):
        local = [(piece[:k], piece[k:], float(score)) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        out.extend(local)
    out.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(a, b) for a, b, _ in out]


def build_spm_tokenizer(tokens: Sequence[str], scores: Sequence[float], token_types: Sequence[int] | None,
                        add_space_prefix: bool = True, unk_id: int | None = 0, bos_id: int | None = None) -> Tokenizer:
    """A SentencePiece BPE (Llama 2 / Mistral / Gemma) from a GGUF's pieces and scores, with byte fallback."""
    if len(scores) != len(tokens):
        raise ModelError(f"tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} tokens; the GGUF is "
                         "corrupt -- re-download it")
    if token_types is not None and (len(token_types) != len(tokens)):
        raise ModelError(f"tokenizer.ggml.token_type has {len(token_types)} entries for {len(tokens)} tokens")
    if token_types is not None and not all(f"<0x{b:02X}>" in set(tokens) for b in (0x00, 0xFF)):
        raise ModelError("this SentencePiece vocabulary has no <0x00>..<0xFF> byte pieces; piegpu needs byte "
                         "fallback (Llama 2, Mistral and Gemma have it)")
    unk = tokens[unk_id] if unk_id is not None and 0 <= unk_id < len(tokens) else None
    tok = Tokenizer(models.BPE(vocab=_vocab(tokens), merges=spm_merges(tokens, scores), unk_token=unk,
                               fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence(([normalizers.Prepend("▁")] if add_space_prefix else [])
                                          + [normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None  # (Gemma's tokenizer.json splits on " ", which the normalizer has already replaced)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if add_space_prefix else []))
    _add_special(tok, tokens, token_types)
    _bos_first(tok, tokens, bos_id)
    return tok


def tokenizer_problem(reader: Any) -> str | None:
    """Why tokenizer_from_gguf would refuse an open GGUF's tokenizer kind (model, BPE pre-tokenizer), or None; cheap:
    nothing is built."""
    fields = reader.fields
    model = fields["tokenizer.ggml.model"].contents() if "tokenizer.ggml.model" in fields else None
    if model not in ("gpt2", "llama"):
        return (f"tokenizer.ggml.model = {model!r} is not supported; piegpu builds 'gpt2' (byte-level BPE) and "
                "'llama' (SentencePiece BPE) tokenizers")
    pre = fields["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in fields else "default"
    if model == "gpt2" and (pre or "default") not in BPE_PRES:
        return f"tokenizer.ggml.pre = {pre!r} is not supported; known byte-level BPE pre-tokenizers: {sorted(BPE_PRES)}"
    return None


def tokenizer_from_gguf(reader: Any) -> Tokenizer:
    """The tokenizer of an open GGUF (gguf.GGUFReader or model.gguf_file.GgufFile) from tokenizer.ggml.*."""
    fields = reader.fields
    where = getattr(reader, "path", None) or getattr(getattr(reader, "data", None), "filename", "GGUF file")

    def field(name: str, required: bool = True, default: Any = None) -> Any:
        f = fields.get(name)
        if f is None:
            if required:
                raise ModelError(f"{where}: metadata {name!r} is missing; this GGUF carries no usable tokenizer -- "
                                 "use a GGUF converted with its tokenizer")
            return default
        return field_contents(f, name, str(where))

    model = field("tokenizer.ggml.model")
    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type", required=False)
    if model == "gpt2":
        add_bos = field("tokenizer.ggml.add_bos_token", False, False)
        try:
            return build_bpe_tokenizer(tokens, field("tokenizer.ggml.merges"), types,
                                       field("tokenizer.ggml.pre", False) or "default",
                                       field("tokenizer.ggml.bos_token_id", False) if add_bos else None)
        except ModelError as e:
            raise ModelError(f"{where}: {e}") from None
    if model == "llama":
        add_bos = field("tokenizer.ggml.add_bos_token", False, True)  # llama.cpp's SentencePiece default
        try:
            return build_spm_tokenizer(tokens, field("tokenizer.ggml.scores"), types,
                                       bool(field("tokenizer.ggml.add_space_prefix", False, True)),
                                       field("tokenizer.ggml.unknown_token_id", False, 0),
                                       field("tokenizer.ggml.bos_token_id", False, 1) if add_bos else None)
        except ModelError as e:
            raise ModelError(f"{where}: {e}") from None
    raise ModelError(f"{where}: tokenizer.ggml.model = {model!r} is not supported; piegpu builds 'gpt2' "
                     "(byte-level BPE) and 'llama' (SentencePiece BPE) tokenizers")
