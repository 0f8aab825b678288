"""A radix tree of KV pages: token prefixes that finished (or still running) sequences computed, for reuse.

Each node is one page of the model's KV pool, keyed by the token ids it holds (page_tokens of
them; fewer for the last, partly filled page of a sequence), under the node of the page before
it. A prompt walks the tree page by page, then takes the longest prefix of one more page's
tokens: the pages it matches are shared with the new sequence (reference counts) and only the
rest is prefilled. A page shared with a partial match is copied -- its matched positions only --
when the new sequence first writes into it (KvPool copy on write), so reuse is token-granular.
The tree holds a reference on each of its pages; when the pool runs short it evicts
least-recently-used leaves that no sequence shares (KvPool.evict), and it never holds more
than max_pages pages. Sequences run under a LoRA adapter cache their pages under a root of their own (`ns`:
the adapter and its scale), so a prefix computed under one adapter is never reused for another or the base.
"""

from __future__ import annotations

import itertools


class _Node:
    __slots__ = ("page", "parent", "key", "children", "used")

    def __init__(self, page: int, parent, key: tuple, used: int):
        self.page, self.parent, self.key, self.used = page, parent, key, used
        self.children: dict = {}


class PrefixCache:
    """Cached KV pages by token prefix (see the module docstring); `pool` is the model's KvPool."""

    def __init__(self, pool, max_pages: int, min_reuse: int = 1):
        self.pool = pool
        self.page = pool.page
        self.max_pages = max(0, int(max_pages))
        self.min_reuse = max(1, int(min_reuse))
        self.roots: dict = {None: _Node(-1, None, (), 0)}  # one tree per adapter (ns); None: the base model
        self.nodes = 0
        self._clock = itertools.count(1)
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0
        self.evicted = 0
        pool.evict = self.evict

    def __len__(self) -> int:
        return self.nodes

    def _walk(self, ids: list, ns=None) -> tuple:
        """(nodes, k): the nodes of the longest cached run of full pages that starts ids, and the page after
        them (a node with k of the next tokens, 0 < k) or None."""
        out, node, P = [], self.roots.get(ns) or _Node(-1, None, (), 0), self.page
        for i in range(len(ids) // P):
            child = node.children.get(tuple(ids[i * P: (i + 1) * P]))
            if child is None or len(child.key) < P:
                break
            out.append(child)
            node = child
        rest = ids[len(out) * P: (len(out) + 1) * P]
        best, best_k = None, 0
        for child in node.children.values():
            k = 0
            for a, b in zip(child.key, rest):
                if a != b:
                    break
                k += 1
            if k > best_k:
                best, best_k = child, k
        return out, (best, best_k)

    def peek(self, ids: list, ns=None) -> int:
        """How many tokens of ids[:-1] take(ids) would reuse now (no effect on the LRU or the counters)."""
        nodes, (_, k) = self._walk(list(ids)[:-1], ns)
        n = len(nodes) * self.page + k
        return n if n >= self.min_reuse else 0

    def take(self, ids: list, ns=None) -> tuple:
        """(pages, n): the cached pages of the longest prefix of ids[:-1] (the last prompt token is always
        embedded by the first decode pass) and the tokens n they hold for it -- the last page maybe in part;
        ([], 0) on a miss."""
        nodes, (extra, k) = self._walk(list(ids)[:-1], ns)
        if extra is not None:
            nodes = nodes + [extra]
        n = (len(nodes) - (extra is not None)) * self.page + k
        if n < self.min_reuse or not nodes:
            self.misses += 1
            return [], 0
        now = next(self._clock)
        for node in nodes:
            node.used = now
        self.hits += 1
        self.reused_tokens += n
        return [node.page for node in nodes], n

    def put(self, tokens: list, pages: list, partial: bool = True, ns=None) -> None:
        """Cache the pages of a sequence holding `tokens` (its page list `pages`); positions of unknown identity
        (-1) end what is cached. A partly filled last page too with `partial` -- not for a sequence that goes
        on writing into it (sharing it would make that sequence copy it at its next write)."""
        if self.max_pages == 0:
            return
        tokens = list(tokens)
        if -1 in tokens:
            tokens = tokens[: tokens.index(-1)]
        P = self.page
        now = next(self._clock)
        node = self.roots.get(ns)
        if node is None:
            node = self.roots[ns] = _Node(-1, None, (), 0)
        for i in range(min(-(-len(tokens) // P) if partial else len(tokens) // P, len(pages))):
            key = tuple(tokens[i * P: (i + 1) * P])
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Node(pages[i], node, key, now)
                self.pool.ref([pages[i]])
                self.nodes += 1
            child.used = now
            if len(key) < P:
                break
            node = child
        if self.nodes > self.max_pages:
            self._drop(self.nodes - self.max_pages, only_unshared=False)

    def evict(self, pages: int) -> int:
        """Drop least-recently-used leaves no sequence shares until `pages` pages went back to the pool."""
        return self._drop(pages, only_unshared=True)

    def _drop(self, count: int, only_unshared: bool) -> int:
        freed = 0
        while freed < count:
            leaves = [n for n in self._leaves() if not only_unshared or self.pool.refs[n.page] == 1]
            if not leaves:
                break
            leaves.sort(key=lambda n: n.used)
            for leaf in leaves[: count - freed]:
                del leaf.parent.children[leaf.key]
                self.pool.unref([leaf.page])
                self.nodes -= 1
                self.evicted += 1
                freed += 1
        return freed

    def _leaves(self) -> list:
        out, stack = [], [n for root in self.roots.values() for n in root.children.values()]
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            else:
                out.append(n)
        return out

    @property
    def pages_held(self) -> int:
        """Pages the tree holds a reference on."""
        return self.nodes

    def clear(self) -> None:
        """Drop every entry (pages no sequence shares go back to the pool)."""
        self._drop(self.nodes, only_unshared=False)
