"""Tokenizer built from GGUF metadata, and the chat prompt template."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from modeltest_helpers import MERGES, SPECIAL_TOKENS, byte_level_vocab

from piegpu.errors import ModelError, ValidationError
from piegpu.model.tokenizer import (
    DEFAULT_SYSTEM_PROMPT,
    SMOLLM2_CHAT_TEMPLATE,
    build_bpe_tokenizer,
    chat_prompt,
    load_chat_template,
    load_tokenizer,
)

ROUND_TRIP = [
    "Once upon a time, there was a fox.",
    "0123456789 and 3.14159 or 1,000,000",
    "Crème brûlée à la façon de Noël; naïve Zoë, Ångström, São Paulo",
    "日本語のテキスト、中文文本，한국어 텍스트",
    "emoji: 🦊🚀 👩‍👩‍👧 ❤️ 🇫🇷",
    "tabs\tand   runs    of\n\n\nwhitespace  \r\n  end  ",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "",
    " leading space and trailing ",
    "def f(x):\n    return x ** 2  # code",
]


@pytest.fixture(scope="module")
def tiny_tokenizer():
    types = [3] * len(SPECIAL_TOKENS) + [1] * (len(byte_level_vocab()) - len(SPECIAL_TOKENS))
    return build_bpe_tokenizer(byte_level_vocab(), MERGES, types, pre="smollm")


@settings(max_examples=150, deadline=None)
@given(text=hs.text(max_size=60))
def test_byte_level_bpe_is_lossless_on_any_text(tiny_tokenizer, text):
    assert tiny_tokenizer.decode(tiny_tokenizer.encode(text).ids, skip_special_tokens=False) == text


def test_tiny_tokenizer_applies_merges_and_specials(tiny_tokenizer):
    enc = tiny_tokenizer.encode("the<|im_end|> the 42")
    assert enc.tokens == ["t", "he", "<|im_end|>", "Ġthe", "Ġ", "4", "2"]
    assert enc.ids[2] == 2


def test_unknown_pre_tokenizer_and_bad_merges():
    with pytest.raises(ModelError, match="tokenizer.ggml.pre = 'deepseek-llm' is not supported.*llama-bpe.*qwen2"):
        build_bpe_tokenizer(byte_level_vocab(), MERGES, pre="deepseek-llm")
    with pytest.raises(ModelError, match="merges\\[0\\]"):
        build_bpe_tokenizer(byte_level_vocab(), ["Ġt"], pre="smollm")


def test_missing_or_corrupt_tokenizer_file(tmp_path):
    with pytest.raises(ModelError, match="tokenizer file not found"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelError, match="cannot parse tokenizer") as e:
        load_tokenizer(tmp_path)
    assert str(tmp_path / "tokenizer.json") in str(e.value)
    assert load_chat_template(tmp_path) is None


# -- the default model's tokenizer ---------------------------------------------------------


def test_default_vocabulary_and_special_tokens(default_tokenizer):
    tok = default_tokenizer
    assert tok.get_vocab_size() == 49152
    specials = {i: t.content for i, t in tok.get_added_tokens_decoder().items() if t.special}
    assert len(specials) == 17
    assert specials[0] == "<|endoftext|>" and specials[1] == "<|im_start|>" and specials[2] == "<|im_end|>"


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_default_round_trips(default_tokenizer, text):
    ids = default_tokenizer.encode(text).ids
    assert default_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_digits_are_one_token_each(default_tokenizer):
    enc = default_tokenizer.encode("In 2024, 1234567890 people")
    digit_tokens = [t for t in enc.tokens if any(ch.isdigit() for ch in t)]
    assert digit_tokens == list("20241234567890")


def test_special_tokens_encode_atomically(default_tokenizer):
    enc = default_tokenizer.encode("<|im_start|>user\nHi<|im_end|>")
    assert enc.ids[0] == 1 and enc.ids[-1] == 2
    assert "<|im_start|>" in enc.tokens and "<|im_end|>" in enc.tokens
    assert default_tokenizer.decode(enc.ids, skip_special_tokens=True) == "user\nHi"


def test_common_words_are_single_tokens(default_tokenizer):
    assert default_tokenizer.encode("Hello world, the cat").tokens == ["Hello", "Ġworld", ",", "Ġthe", "Ġcat"]


def test_default_chat_template_is_smollm2s(default_dir):
    assert load_chat_template(default_dir) == SMOLLM2_CHAT_TEMPLATE


# -- chat prompt -------------------------------------------------------------------------------


CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c\nd"}],
    [],
]


def test_chat_prompt_default_system_prompt():
    p = chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    assert p == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    p = chat_prompt([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], add_generation_prompt=False)
    assert p == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("gen", [True, False])
def test_chat_prompt_matches_the_jinja_template(messages, gen):
    pytest.importorskip("jinja2")
    from piegpu.model.tokenizer import _render_jinja

    assert chat_prompt(messages, gen) == _render_jinja(SMOLLM2_CHAT_TEMPLATE, messages, gen)


def test_chat_prompt_renders_other_templates_and_checks_input():
    pytest.importorskip("jinja2")
    template = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    assert chat_prompt([{"role": "user", "content": "x"}], template=template) == "[user]x"
    with pytest.raises(ValidationError, match="messages\\[0\\]"):
        chat_prompt([{"role": "user"}])
    with pytest.raises(ValidationError):
        chat_prompt(["hello"])  # type: ignore[list-item]
