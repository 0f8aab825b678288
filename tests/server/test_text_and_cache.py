"""The server's host-side pieces: streamed text with stop strings held back, and the prefix cache's LRU."""

from __future__ import annotations

from types import SimpleNamespace

from piegpu.server.prefix_cache import PrefixCache
from piegpu.server.text import TextStream


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
    assert s.sent == "abSTxyy" and s.finish() == ""


def test_held_text_is_released_at_the_end_and_split_characters_wait():
    s = TextStream(CharTokenizer(), ["\n\n"])
    assert feed(s, "hi\n") == ["h", "i", ""]
    assert s.finish() == "\n"
    s = TextStream(CharTokenizer(), [])
    assert s.push(ord("a")) == "a" and s.push(1) == "" and s.push(2) == "é"
    s.push(1)  # generation ends inside a character: it is left out, as model.generate does
    assert s.finish() == "" and s.sent == "aé"


def session(tokens, size=256):
    return SimpleNamespace(tokens=list(tokens), ws=SimpleNamespace(length=len(tokens), max_tokens=size))


def test_prefix_cache_finds_the_longest_shared_prefix_and_evicts_lru():
    c = PrefixCache(max_tokens=3 * 256, max_entries=8)
    a, b = session([1, 2, 3, 4, 5]), session([1, 2, 9, 9])
    c.put(a)
    c.put(b)
    got, n = c.take([1, 2, 3, 4, 7, 8])
    assert got is a and n == 4
    got, n = c.take([1, 2, 3, 4, 5, 6])  # the last prompt token is never taken from the cache
    assert got is a and n == 5
    got, n = c.take([1, 2, 3, 4, 5])
    assert got is a and n == 4
    assert c.take([7, 7]) == (None, 0)
    c.put(session([1, 2, 3]))  # a prefix of a cached entry: nothing new
    assert len(c) == 2
    longer = session([1, 2, 9, 9, 10])
    c.put(longer)  # holds everything b does: b goes
    assert len(c) == 2 and c.take([1, 2, 9, 9, 10, 11])[0] is longer
    c.put(session([5]))
    c.put(session([6]))  # 4 x 256 positions > the bound: the least recently used (a) goes
    assert len(c) == 3 and c.take([1, 2, 3, 4, 0])[1] <= 2


def test_prefix_cache_never_holds_unknown_contents_or_oversized_sets():
    c = PrefixCache(max_tokens=256)
    c.put(session([1, -1, 3]))
    c.put(session([1, 2], size=512))
    s = session([1, 2, 3])
    s.ws.length = 2  # the working set and the token list disagree
    c.put(s)
    assert len(c) == 0
    assert PrefixCache(max_tokens=0).take([1, 2]) == (None, 0)
