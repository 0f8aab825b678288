"""The server's prefix cache: its LRU and the longest shared prefix (streamed text: tests/textgen/test_stream.py)."""

from __future__ import annotations

from types import SimpleNamespace

from piegpu.server.prefix_cache import PrefixCache


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
