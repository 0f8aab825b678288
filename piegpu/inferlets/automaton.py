"""Token-level automata of regular grammars, laid out for the device (the device path of grammar-constrained decoding).

A regex (or a JSON schema, turned into one by outlines-core) compiles with outlines-core's Index over the model's
vocabulary into a DFA whose edges are tokens: state s allows token t when t's bytes lead to a live state. The device
reads it as two tables:

    class_of: i32[vocab]      tokens that behave alike in every state share a class (a regex over a 49k vocabulary
                              has some hundreds of classes: letters in a string are one)
    table:    i32[states, C]  next state of (state, class); -1 where the token is not allowed

so the mask of state s is `table[s, class_of] >= 0` and the next state `table[s, class_of[token]]`. EOS has a class
of its own, allowed exactly in accepting states (where it keeps the state); special tokens are never allowed. Class 0
is that "never" class. Built once per (grammar, tokenizer) and cached on disk by content hash like kernels.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import ValidationError

MAX_TABLE_BYTES = 32 << 20  # the device tables' budget: a grammar whose tables exceed it runs on the host
MAX_STATES = 1 << 16
_MEMORY: dict = {}  # key -> TokenAutomaton, this process's builds


class Unfit(ValidationError):
    """A grammar that cannot run as a device automaton; str() says why."""


@dataclass
class TokenAutomaton:
    """A grammar's token DFA as device tables (state 0 is the start)."""

    class_of: np.ndarray  # i32 [vocab]
    table: np.ndarray  # i32 [states, classes]
    accepting: np.ndarray  # bool [states]
    eos_class: int
    key: str
    build_s: float = 0.0  # 0.0 when it came from a cache
    _dist: np.ndarray | None = field(default=None, repr=False)

    @property
    def states(self) -> int:
        """Number of states."""
        return self.table.shape[0]

    @property
    def classes(self) -> int:
        """Number of token classes."""
        return self.table.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes of the device tables."""
        return self.class_of.nbytes + self.table.nbytes

    def allowed(self, state: int) -> np.ndarray:
        """Host: the bool [vocab] mask of `state`."""
        return self.table[state][self.class_of] >= 0

    def next(self, state: int, token: int) -> int:
        """Host: the state after `token` (-1: not allowed)."""
        return int(self.table[state, self.class_of[token]])

    def is_done(self, state: int) -> bool:
        """Whether only EOS may follow (accepting, nothing else allowed)."""
        row = self.table[state].copy()
        row[self.eos_class] = -1
        return bool(self.accepting[state]) and not (row >= 0).any()

    @property
    def distance(self) -> np.ndarray:
        """Tokens from each state to an accepting one (a large value where none is reachable)."""
        if self._dist is None:
            self._dist = _distances(self.table, self.accepting, self.eos_class)
        return self._dist

    def completion(self, state: int, limit: int) -> list | None:
        """A shortest token path from `state` to an accepting state (None if longer than `limit`)."""
        d = self.distance
        if d[state] > limit:
            return None
        members = _class_members(self.class_of, self.classes)
        path = []
        while d[state] > 0:
            row = self.table[state].copy()
            row[self.eos_class] = -1
            ok = np.flatnonzero((row >= 0) & (d[np.maximum(row, 0)] == d[state] - 1))
            cls = int(ok[0])
            path.append(int(members[cls]))
            state = int(row[cls])
        return path

    def device_arrays(self, padded: int) -> tuple:
        """(class_of, table flattened and padded to `padded` entries with -1) as the device reads them."""
        flat = np.full(padded, -1, np.int32)
        flat[:self.table.size] = self.table.reshape(-1)
        return self.class_of, flat

    def to_bytes(self) -> bytes:
        """The tables as .npz bytes (the disk cache's format)."""
        buf = io.BytesIO()
        np.savez(buf, class_of=self.class_of, table=self.table, accepting=self.accepting,
                 eos_class=np.int32(self.eos_class))
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, key: str) -> "TokenAutomaton":
        """Tables written by to_bytes()."""
        z = np.load(io.BytesIO(data))
        return cls(z["class_of"], z["table"], z["accepting"], int(z["eos_class"]), key)


def _class_members(class_of: np.ndarray, classes: int) -> np.ndarray:
    """The lowest token id of each class."""
    first = np.full(classes, -1, np.int64)
    order = np.arange(class_of.size)[::-1]
    first[class_of[order]] = order  # later writes win: the lowest id stays
    return first


def _distances(table: np.ndarray, accepting: np.ndarray, eos_class: int) -> np.ndarray:
    """Reverse BFS over the state graph: tokens from each state to an accepting state."""
    s_count = table.shape[0]
    big = np.iinfo(np.int32).max // 2
    t = table.copy()
    t[:, eos_class] = -1
    src, col = np.nonzero(t >= 0)
    edges = np.unique(np.stack([src, t[src, col]], 1), axis=0)  # (from, to)
    dist = np.full(s_count, big, np.int64)
    frontier = np.flatnonzero(accepting)
    dist[frontier] = 0
    d = 0
    while frontier.size:
        d += 1
        into = np.isin(edges[:, 1], frontier)
        cand = np.unique(edges[into, 0])
        frontier = cand[dist[cand] == big]
        dist[frontier] = d
    return dist


def _mix(x: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 of uint64 values (a salt picks an independent hash)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64((0x9E3779B97F4A7C15 * (salt + 1)) & 0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def tables(transitions: dict, start, finals, vocab: int, eos: int, eos_ids, never) -> tuple:
    """(class_of, table, accepting, eos_class) of outlines-core transitions {state: {token: next}}.

    Token columns (their next state in every state) are hashed twice over 64 bits and grouped; the grouping is then
    checked exactly against every transition, so a hash collision is an error, never a wrong mask.
    """
    order = list(dict.fromkeys([start, *transitions, *finals]))  # state 0 is the start
    n = len(order)
    if n > MAX_STATES:
        raise Unfit(f"the automaton has {n} states (max {MAX_STATES})")
    raw = np.array(order, np.int64)
    sort = np.argsort(raw)
    renumber = lambda states: sort[np.searchsorted(raw[sort], states)]  # noqa: E731 -- outlines' ids -> 0..n-1
    h1 = np.zeros(vocab, np.uint64)
    h2 = np.zeros(vocab, np.uint64)
    rows = []
    with np.errstate(over="ignore"):
        for s, edges in transitions.items():
            if not edges:
                continue
            toks = np.fromiter(edges.keys(), np.int64, len(edges))
            nxt = renumber(np.fromiter(edges.values(), np.int64, len(edges)))
            keep = (toks != eos) & (toks < vocab)
            toks, nxt = toks[keep], nxt[keep]
            sid = int(renumber(np.array([s]))[0])
            rows.append((sid, toks, nxt))
            code = (np.uint64(sid) * np.uint64(n + 1) + nxt.astype(np.uint64) + np.uint64(1))
            h1[toks] += _mix(code, 0)
            h2[toks] += _mix(code, 1)
    special = np.zeros(vocab, bool)
    special[list(never)] = True
    special[list(eos_ids)] = False
    h1[special] = 0  # special tokens join the "never" class (no transitions anywhere)
    h2[special] = 0
    eos_mask = np.zeros(vocab, bool)
    eos_mask[list(eos_ids)] = True
    pair = np.stack([h1, h2], 1)
    pair[eos_mask] = np.uint64(0xFFFFFFFFFFFFFFFF)  # EOS: a class of its own
    base = np.zeros((1, 2), np.uint64)  # class 0: tokens with no transition at all
    _, inv = np.unique(np.concatenate([base, pair]), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    remap = np.full(inv.max() + 1, -1, np.int64)
    remap[inv[0]] = 0
    order = [c for c in dict.fromkeys(inv[1:].tolist()) if c != inv[0]]
    remap[order] = np.arange(1, len(order) + 1)
    class_of = remap[inv[1:]].astype(np.int32)
    classes = len(order) + 1
    table = np.full((n, classes), -1, np.int32)
    for s, toks, nxt in rows:
        table[s, class_of[toks]] = nxt
    sizes = np.bincount(class_of, minlength=classes)
    for s, toks, nxt in rows:  # exact check: every transition, and nothing more per state (class sizes add up)
        if not (np.array_equal(table[s, class_of[toks]], nxt) and int(sizes[table[s] >= 0].sum()) == toks.size):
            raise RuntimeError("automaton: token classes collided (a 128-bit hash collision); please report it")
    accepting = np.zeros(n, bool)
    accepting[renumber(np.array(sorted(finals), np.int64))] = True
    eos_class = int(class_of[next(iter(eos_ids))]) if eos_ids else classes
    if not eos_ids:
        table = np.concatenate([table, np.full((n, 1), -1, np.int32)], 1)
    table[accepting, eos_class] = np.flatnonzero(accepting)
    return class_of, table, accepting, eos_class


def vocabulary_key(pieces: list, eos_ids) -> str:
    """A content hash of a vocabulary's token bytes and EOS ids."""
    h = hashlib.sha256()
    for p in pieces:
        h.update(b"\x00" if p is None else b"\x01" + len(p).to_bytes(4, "little") + p)
    h.update(json.dumps(sorted(int(e) for e in eos_ids)).encode())
    return h.hexdigest()


def build(regex: str, pieces: list, eos_ids, vocab_key: str | None = None, budget: int = MAX_TABLE_BYTES,
          disk: bool = True) -> TokenAutomaton:
    """The TokenAutomaton of `regex` over token bytes `pieces` (None: special); cached in memory and on disk.

    Unfit where outlines-core rejects the regex or the tables would exceed `budget` bytes.
    """
    from ..paths import atomic_write, cache_dir
    vocab_key = vocab_key or vocabulary_key(pieces, eos_ids)
    key = hashlib.sha256(f"automaton-v1\0{vocab_key}\0{regex}".encode()).hexdigest()[:32]
    hit = _MEMORY.get(key)
    path = cache_dir() / "automata" / f"{key}.npz"
    if hit is None and disk and path.is_file():
        try:
            hit = TokenAutomaton.from_bytes(path.read_bytes(), key)
        except (OSError, ValueError, KeyError):
            hit = None  # a damaged cache file is rebuilt
    if hit is None:
        hit = _build(regex, pieces, eos_ids, key, budget)
        if disk:
            atomic_write(path, hit.to_bytes())
    if hit.nbytes > budget:
        raise Unfit(f"its device tables take {hit.nbytes / 2**20:.2f} MiB, over the {budget / 2**20:.2f} MiB device "
                    "table budget (automaton.MAX_TABLE_BYTES)")
    _MEMORY[key] = hit
    return hit


def outlines_core():
    """The outlines_core module (Unfit when it is not installed: the request runs on the host)."""
    try:
        import outlines_core as oc
        import outlines_core.json_schema  # noqa: F401
    except ImportError:
        raise Unfit("device automata need outlines-core. Fix: pip install 'outlines-core>=0.2.14,<0.3'") from None
    return oc


def _build(regex: str, pieces: list, eos_ids, key: str, budget: int) -> TokenAutomaton:
    oc = outlines_core()
    Index, Vocabulary = oc.Index, oc.Vocabulary
    t0 = time.perf_counter()
    vocab = len(pieces)
    eos_ids = tuple(int(e) for e in eos_ids if 0 <= int(e) < vocab)
    by_bytes: dict = {}
    for i, p in enumerate(pieces):
        if p and i not in eos_ids:
            by_bytes.setdefault(p, []).append(i)
    eos = eos_ids[0] if eos_ids else vocab
    try:
        index = Index(regex, Vocabulary(eos, by_bytes))
    except (ValueError, TypeError, RuntimeError, BaseException) as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit, MemoryError)):
            raise
        raise Unfit(f"outlines-core cannot build a token automaton of this regex: {e}") from None
    never = [i for i, p in enumerate(pieces) if not p]
    transitions = index.get_transitions()
    finals = index.get_final_states()
    edges = sum(len(v) for v in transitions.values())
    if edges > budget:  # a cheap bound before the tables are laid out (they take far fewer bytes than edges)
        raise Unfit(f"the automaton has {edges} token edges, over the {budget / 2**20:.2f} MiB device table budget")
    class_of, table, accepting, eos_class = tables(transitions, index.get_initial_state(), finals, vocab, eos,
                                                   eos_ids, never)
    return TokenAutomaton(class_of, table, accepting, eos_class, key, time.perf_counter() - t0)


__all__ = ["TokenAutomaton", "Unfit", "build", "vocabulary_key", "tables",
           "MAX_TABLE_BYTES"]
