"""Tokenizers built from GGUF metadata encode exactly as the checkpoint's tokenizer.json, per family.

tests/fixtures/models/tokenizers/ holds each family's tokenizer.json shaped as its released
checkpoints' (scripts/make_model_fixtures.py --tokenizers): Llama 3 and Qwen2 byte-level BPE,
Llama 2 / Mistral and Gemma SentencePiece BPE with byte fallback. Each is converted to GGUF
metadata as llama.cpp's converter does (modeltest_helpers.gguf_tokenizer_fields), written with the
gguf package's writer, read back by piegpu, and must give the same ids on a few KB of mixed text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from modeltest_helpers import add_tokenizer, gguf_tokenizer_fields
from piegpu.model.gguf_file import GgufFile
from piegpu.model.gguf_tokenizer import tokenizer_from_gguf

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "models"
TOKS = FIXTURES / "tokenizers"
# family -> llama.cpp's tokenizer.ggml.pre (byte-level BPE) or None (SentencePiece)
FAMILIES = {"llama3": "llama-bpe", "qwen2": "qwen2", "mistral": None, "gemma3": None}


def texts() -> list:
    mixed = (FIXTURES / "texts" / "mixed.txt").read_text(encoding="utf-8")
    decl = (FIXTURES / "texts" / "declaration_of_independence.txt").read_text(encoding="utf-8")
    return [mixed, decl] + mixed.splitlines() + ["", " ", "  leading", "trailing  ", "\n\n\t x", "a  b   c    d"]


def gguf_tokenizer(tmp_path: Path, family: str) -> Tokenizer:
    import gguf
    spm_path = TOKS / f"{family}.spm.json"
    spm = json.loads(spm_path.read_text(encoding="utf-8")) if spm_path.exists() else None
    fields = gguf_tokenizer_fields(TOKS / f"{family}.json", FAMILIES[family], spm)
    path = tmp_path / f"{family}.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    add_tokenizer(w, fields)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tokenizer_from_gguf(GgufFile(path))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gguf_tokenizer_encodes_as_tokenizer_json(tmp_path, family):
    hf = Tokenizer.from_file(str(TOKS / f"{family}.json"))
    ours = gguf_tokenizer(tmp_path, family)
    specials = [t for t in hf.get_added_tokens_decoder().values()]
    total = 0
    for text in texts() + [f"{s.content}hi{s.content} x" for s in specials]:
        for special in (True, False):
            want = hf.encode(text, add_special_tokens=special).ids
            got = ours.encode(text, add_special_tokens=special).ids
            assert got == want, (family, text[:60], special, ours.encode(text).tokens[:20], hf.encode(text).tokens[:20])
            total += len(want)
        assert ours.decode(want) == hf.decode(want)
        assert ours.decode(want, skip_special_tokens=False) == hf.decode(want, skip_special_tokens=False)
    fallback = sum(t.startswith("<0x") for t in hf.encode(texts()[0]).tokens)
    print(f"{family}: {total} tokens equal ({fallback} byte-fallback pieces in the mixed text)")


def test_unknown_tokenizer_model_is_a_clear_error(tmp_path):
    import gguf
    from piegpu.errors import ModelError
    path = tmp_path / "bert.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("bert")
    w.add_token_list(["[PAD]", "a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelError, match="tokenizer.ggml.model = 'bert' is not supported.*'gpt2'.*'llama'"):
        tokenizer_from_gguf(GgufFile(path))


CHATS = json.loads((TOKS / "chat_templates.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("family", sorted(CHATS))
def test_gguf_chat_template_renders_as_transformers(tmp_path, family):
    """tokenizer.chat_template read back from a GGUF renders every conversation as transformers did (fixture),
    errors included; the encoded prompt has one BOS, as transformers' apply_chat_template(tokenize=True)."""
    import gguf
    from piegpu.errors import ModelError
    from piegpu.model.tokenizer import chat_prompt
    from piegpu.model.chat_template import render_chat_template
    spec = CHATS[family]
    path = tmp_path / "chat.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_chat_template(spec["template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    template = GgufFile(path).fields["tokenizer.chat_template"].contents()
    assert template == spec["template"]
    specials = {k: v for k, v in spec["special_tokens"].items() if v is not None}
    ours_tok = gguf_tokenizer(tmp_path, family)
    hf_tok = Tokenizer.from_file(str(TOKS / f"{family}.json"))
    adds_bos = hf_tok.encode("x").ids[0] != hf_tok.encode("x", add_special_tokens=False).ids[0]
    for case in spec["cases"]:
        args = (template, case["messages"], case["add_generation_prompt"], specials, case["tools"])
        if "error" in case:
            with pytest.raises(ModelError, match=case["error"].replace(".", r"\.")):
                render_chat_template(*args)
            continue
        assert render_chat_template(*args) == case["expected"], case
        if case["tools"] is None:
            text = chat_prompt(case["messages"], case["add_generation_prompt"], template, specials, adds_bos)
            assert ours_tok.encode(text).ids == hf_tok.encode(case["expected"], add_special_tokens=False).ids
