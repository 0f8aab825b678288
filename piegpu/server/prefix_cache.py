"""Finished sequences' KV states kept for reuse: a new prompt that starts with their tokens skips that prefill."""

from __future__ import annotations

from collections import OrderedDict

from ..runtime.session import shared_prefix


class PrefixCache:
    """An LRU of sessions (working sets holding a token sequence), bounded in tokens and in entries.

    `take(ids)` finds the entry sharing the longest prefix with ids[:-1] (the last prompt token is
    always embedded by the first decode pass) and returns it with that length; the caller copies
    the prefix on the device (the entry stays cached, so several requests can share one system
    prompt). `put(session)` adds a finished sequence's session; an entry whose tokens are a
    prefix of another's is dropped as redundant. Memory is bounded by the working sets' sizes
    (positions allocated, not only used), evicting the least recently used first.
    """

    def __init__(self, max_tokens: int, max_entries: int = 64, min_reuse: int = 1):
        self.max_tokens = max(0, int(max_tokens))
        self.max_entries = max(0, int(max_entries))
        self.min_reuse = max(1, int(min_reuse))
        self._entries: "OrderedDict[int, tuple]" = OrderedDict()  # id(session) -> (tokens tuple, session)
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tokens_held(self) -> int:
        """Positions allocated by the cached working sets."""
        return sum(s.ws.max_tokens for _, s in self._entries.values())

    def _best(self, ids: list) -> tuple:
        want = ids[:-1]
        best, best_n = None, 0
        for key, (tokens, sess) in self._entries.items():
            n = shared_prefix(tokens, want)
            if n > best_n:
                best, best_n = key, n
        return best, best_n

    def peek(self, ids: list) -> int:
        """How many tokens of ids[:-1] take(ids) would reuse now (no effect on the LRU or the counters)."""
        best, n = self._best(ids)
        return n if best is not None and n >= self.min_reuse else 0

    def take(self, ids: list) -> tuple:
        """(session, n): the cached session sharing the longest prefix n with ids[:-1], or (None, 0)."""
        best, best_n = self._best(ids)
        if best is None or best_n < self.min_reuse:
            self.misses += 1
            return None, 0
        self._entries.move_to_end(best)
        self.hits += 1
        self.reused_tokens += best_n
        return self._entries[best][1], best_n

    def put(self, session) -> None:
        """Cache a session whose working set holds session.tokens.

        The session may go on decoding: positions it already holds never change, so a copy of
        the first n of them stays right (the entry keeps the tokens it had when put).
        """
        if self.max_entries == 0 or session.ws.max_tokens > self.max_tokens:
            return
        tokens = tuple(session.tokens)
        if not tokens or len(tokens) != session.ws.length or -1 in tokens:
            return  # contents unknown: never reuse
        for key, (other, _) in list(self._entries.items()):
            if other[: len(tokens)] == tokens and len(other) >= len(tokens):
                self._entries.move_to_end(key)
                return  # an entry already holds this prefix
            if tokens[: len(other)] == other:
                del self._entries[key]  # the new entry holds everything this one does
        self._entries[id(session)] = (tokens, session)
        while self._entries and (len(self._entries) > self.max_entries or self.tokens_held > self.max_tokens):
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Drop every entry (their working sets are freed with the last reference)."""
        self._entries.clear()
