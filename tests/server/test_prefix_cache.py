"""The server's prefix cache: a radix tree of KV pages (its sharing on the device: tests/server/test_engine.py)."""

from __future__ import annotations

import numpy as np

from piegpu.server.prefix_cache import PrefixCache


class Pool:
    """The reference counting of model/kv_pool.py's KvPool, pages of 2 positions."""

    page = 2

    def __init__(self, pages=32):
        self.refs = np.zeros(pages, np.int32)
        self.evict = None

    def ref(self, pages):
        np.add.at(self.refs, pages, 1)

    def unref(self, pages):
        np.add.at(self.refs, pages, -1)


def test_prefix_cache_finds_the_longest_prefix_page_by_page_then_within_a_page():
    pool = Pool()
    c = PrefixCache(pool, max_pages=16)
    c.put([1, 2, 3, 4, 5], [10, 11, 12])  # two full pages and a partly filled third
    assert len(c) == 3 and pool.refs[10] == pool.refs[11] == pool.refs[12] == 1
    assert c.take([1, 2, 3, 4, 7, 8]) == ([10, 11], 4)
    assert c.take([1, 2, 3, 4, 5, 6]) == ([10, 11, 12], 5)  # into the partly filled page
    assert c.take([1, 2, 3, 4]) == ([10, 11], 3)  # the last prompt token is never taken from the cache
    assert c.take([1, 2, 3, 9, 9]) == ([10, 11], 3)  # one token of the second page
    assert c.take([7, 7, 7]) == ([], 0)
    assert c.peek([1, 2, 3, 4, 0]) == 4
    c.put([1, 2, 9, 9], [10, 20])  # shares the first page's node, adds a sibling
    assert len(c) == 4 and pool.refs[10] == 1 and pool.refs[20] == 1
    assert c.take([1, 2, 9, 9, 0]) == ([10, 20], 4)
    assert c.hits == 5 and c.misses == 1


def test_prefix_cache_stops_at_unknown_tokens_and_keeps_its_bound():
    pool = Pool()
    c = PrefixCache(pool, max_pages=3)
    c.put([1, 2, -1, 4, 5, 6], [1, 2, 3])
    assert len(c) == 1
    c.put([7, 8, 9, 10, 11, 12], [4, 5, 6])  # 4 pages > 3: the least recently used leaf goes
    assert len(c) == 3 and pool.refs[1] == 0 and c.evicted == 1
    assert PrefixCache(Pool(), max_pages=0).take([1, 2, 3]) == ([], 0)


def test_eviction_spares_pages_a_sequence_shares():
    pool = Pool()
    c = PrefixCache(pool, max_pages=16)
    assert pool.evict == c.evict
    c.put([1, 2, 3, 4], [1, 2])
    c.put([5, 6, 7, 8], [3, 4])
    pool.ref([4])  # a running sequence shares page 4
    assert c.evict(10) == 2  # leaves first, parents after them; page 4 (shared) stays, and so does its parent
    assert len(c) == 2 and c.take([5, 6, 7, 8, 0]) == ([3, 4], 4)
    assert pool.refs[1] == pool.refs[2] == 0
