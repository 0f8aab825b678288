"""Streamed text (textgen/stream.py): stop strings held back, split characters, incremental decoding."""

from __future__ import annotations

import random

import pytest

from piegpu.textgen.stream import TextStream
from piegpu.textgen.tokens import TokenOutput


class CharTokenizer:
    """Token i is chr(i); token 0xD800.. pieces make a character that needs two tokens."""

    def decode(self, ids):
        out, i = [], 0
        while i < len(ids):
            if ids[i] == 1:  # first half of "é"
                if i + 1 < len(ids) and ids[i + 1] == 2:
                    out.append("é")
                    i += 2
                    continue
                out.append("\ufffd")
                i += 1
                continue
            out.append(chr(ids[i]))
            i += 1
        return "".join(out)


def feed(stream, text):
    return [stream.push(ord(c)) for c in text]


def test_text_before_a_stop_string_is_held_until_it_cannot_match():
    s = TextStream(CharTokenizer(), ["STOP"])
    pieces = feed(s, "abST")
    assert "".join(pieces) == "ab" and not s.stopped  # "ST" may start STOP
    pieces = feed(s, "x")
    assert "".join(pieces) == "STx"  # it did not
    pieces = feed(s, "yySTOPzz")
    assert "".join(pieces) == "yy" and s.stopped
    assert s.text == "abSTxyy" and s.finish() == ""


def test_held_text_is_released_at_the_end_and_split_characters_wait():
    s = TextStream(CharTokenizer(), ["\n\n"])
    assert feed(s, "hi\n") == ["h", "i", ""]
    assert s.finish() == "\n"
    s = TextStream(CharTokenizer(), [])
    assert s.push(ord("a")) == "a" and s.push(1) == "" and s.push(2) == "é"
    s.push(1)  # generation ends inside a character: it is left out, as model.generate does
    assert s.finish() == "" and s.text == "aé"



class CountingTokenizer(CharTokenizer):
    """CharTokenizer that counts the tokens it decodes."""

    def __init__(self):
        self.decoded = 0

    def decode(self, ids):
        self.decoded += len(ids)
        return super().decode(ids)


def test_decoding_is_incremental_not_quadratic():
    tok = CountingTokenizer()
    s = TextStream(tok, ["never appears"])
    n = 2000
    out = "".join(s.push(ord("a") + i % 26) for i in range(n)) + s.finish()
    assert out == "".join(chr(ord("a") + i % 26) for i in range(n))
    assert tok.decoded < 6 * n  # a small window per token (the whole list again each time would be ~n^2/2)


class SentencePieceLike:
    """Pieces with a leading-space marker: decode() turns it into a space and strips the first one (Metaspace)."""

    PIECES = {10: "\u2581the", 11: "\u2581cat", 12: "s", 13: "\u2581sat", 14: ".", 15: "\u2581\u2581"}

    def decode(self, ids):
        return "".join(self.PIECES[i] for i in ids).replace("\u2581", " ").removeprefix(" ")


def test_a_leading_space_decoder_streams_what_the_whole_list_decodes():
    tok = SentencePieceLike()
    ids = [10, 11, 12, 13, 15, 14, 10]
    s = TextStream(tok, [])
    assert "".join(s.push(t) for t in ids) + s.finish() == tok.decode(ids) == "the cats sat  . the"


def test_pieces_add_up_to_the_whole_text_for_the_default_tokenizer(default_model):
    """Byte-level BPE with characters split over tokens (accents, CJK, emoji): the stream equals decode(all)."""
    tok = default_model.tokenizer
    text = ("Caf\u00e9 na\u00efve \u4f60\u597d\u4e16\u754c \U0001f600\U0001f680 r\u00e9sum\u00e9 -- "
            "\u00fcber \u00e5ngstr\u00f6m\n\n")
    ids = tok.encode(text * 3).ids
    rnd = random.Random(3)
    for trial in range(20):
        cut = ids[rnd.randrange(len(ids)):][: rnd.randrange(1, 60)]
        stops = [rnd.choice(["\n\n", "\u00e9s", "\U0001f680", "zz", "na\u00efve \u4f60"])]
        s = TextStream(tok, stops)
        pieces = [s.push(t) for t in cut]
        out = "".join(pieces) + s.finish()
        whole = tok.decode(cut).rstrip("\ufffd")
        hit = min((i for i in (whole.find(x) for x in stops) if i >= 0), default=-1)
        want = whole if hit < 0 else whole[:hit]
        assert out == want, (trial, cut, stops)
        assert not any(x in "".join(pieces) for x in stops)


def test_token_output_ends_at_stop_ids_budget_and_cancel():
    out = TokenOutput(CharTokenizer(), {0}, ["XY"], budget=5)
    assert out.accept(ord("a")) == ("a", True)
    assert out.accept(ord("X")) == ("", True)  # may begin XY: held
    assert out.accept(0) == ("", False) and out.stop_reason == "stop token"
    assert out.finish() == "X" and out.text == "aX" and out.tokens == [ord("a"), ord("X")]
    out = TokenOutput(CharTokenizer(), (), [], budget=2)
    assert out.accept(ord("a"))[1] and not out.accept(ord("b"))[1] and out.stop_reason == "max_tokens"
    seen = []
    out = TokenOutput(CharTokenizer(), (), [], budget=9, on_piece=lambda p: seen.append(p) or len(seen) < 2)
    assert out.accept(ord("a"))[1] and not out.accept(ord("b"))[1] and out.stop_reason == "cancelled"
    out = TokenOutput(CharTokenizer(), (), [], budget=9)
    out.cancel()
    assert out.accept(ord("c")) == ("c", False) and out.stop_reason == "cancelled"  # the drawn token still counts
