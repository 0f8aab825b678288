"""A pushdown automaton over bytes that accepts exactly the JSON texts of a (small) schema.

Works on UTF-8 bytes, not characters, because byte-level BPE tokens may split a
multi-byte character; strings are checked to be valid UTF-8 as they grow. A state is
an immutable stack of frames (top last), interned to an int so token walks can memoize
transitions as `sid * 256 + byte -> sid`. Frames:

    ('V', node, ws)                      a value of schema node `node` is expected
    ('S', role, esc, hexleft, utf)       inside a string (role 'v' value, 'k' free key)
    ('K', prefix)                        inside a key constrained to the object's properties
    ('N', phase, integer_only, digits)   inside a number (digits: of the current part)
    ('L', rest)                          inside true/false/null (rest = bytes still due)
    ('O', node, phase, seen, key, ws)    an object; phase open|key|inkey|colon|value|next
    ('A', node, phase, ws)               an array; phase open|value|next
    ('D',)                               the top-level value is closed: only EOS may follow

No state is a dead end: a ',' is refused when no property is left to write, and
containers are not opened past max_depth. `distance(sid)` is the fewest bytes that
complete the text; the token masker uses it to guarantee completion within a budget.
"""

from __future__ import annotations

from .json_schema import Schema

WS = frozenset(b" \t\n\r")
DIGITS = frozenset(b"0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")
ESCAPES = frozenset(b'"\\/bfnrt')
NUMBER_DONE = frozenset(("zero", "int", "frac", "exp_digits"))
MAX_DIGITS = {"int": 16, "frac": 16, "exp_digits": 3}  # per part: keeps numbers sane (and states few)
LITERALS = {ord("t"): (b"rue", "boolean"), ord("f"): (b"alse", "boolean"), ord("n"): (b"ull", "null")}
MIN_VALUE = {"string": 2, "number": 1, "integer": 1, "boolean": 4, "null": 4, "any": 1, "array": 2}
REJECT = -1


def _utf8_lead(c: int):
    """(continuation bytes left, lo, hi of the next byte) after lead byte c, or None if c cannot start one."""
    if 0xC2 <= c <= 0xDF:
        return (1, 0x80, 0xBF)
    if c == 0xE0:
        return (2, 0xA0, 0xBF)  # no overlong 3-byte forms
    if c == 0xED:
        return (2, 0x80, 0x9F)  # no UTF-16 surrogates
    if 0xE1 <= c <= 0xEF:
        return (2, 0x80, 0xBF)
    if c == 0xF0:
        return (3, 0x90, 0xBF)
    if 0xF1 <= c <= 0xF3:
        return (3, 0x80, 0xBF)
    if c == 0xF4:
        return (3, 0x80, 0x8F)  # nothing past U+10FFFF
    return None


class JsonGrammar:
    """The automaton of one schema (None: any JSON object; {}: any JSON value)."""

    def __init__(self, schema=None, max_whitespace: int = 4, max_depth: int = 12):
        if isinstance(max_whitespace, bool) or not isinstance(max_whitespace, int) or max_whitespace < 0:
            raise ValueError(f"max_whitespace must be an int >= 0, got {max_whitespace!r}")
        self.schema = Schema({"type": "object"} if schema is None else schema)
        self.max_ws = max_whitespace
        self.max_depth = max(max_depth, self.schema.depth + 1)
        self._ids: dict = {}
        self._states: list = []
        self._trans: dict = {}
        self._dist: dict = {}
        self.start = self.intern((("V", self.schema.root, 0),))

    # ---- interning -----------------------------------------------------------------------
    def intern(self, stack: tuple) -> int:
        """The id of state `stack` (allocated on first sight)."""
        sid = self._ids.get(stack)
        if sid is None:
            sid = self._ids[stack] = len(self._states)
            self._states.append(stack)
        return sid

    def stack(self, sid: int) -> tuple:
        """The frames of state `sid`."""
        return self._states[sid]

    @property
    def state_count(self) -> int:
        """States seen so far."""
        return len(self._states)

    # ---- queries ---------------------------------------------------------------------------
    def step(self, sid: int, byte: int) -> int:
        """The state after `byte`, or REJECT (-1); memoized."""
        key = sid * 256 + byte
        nxt = self._trans.get(key)
        if nxt is None:
            st = self._step(self._states[sid], byte)
            nxt = self._trans[key] = REJECT if st is None else self.intern(st)
        return nxt

    def feed(self, sid: int, data: bytes) -> int:
        """The state after every byte of data, or REJECT."""
        for b in data:
            sid = self.step(sid, b)
            if sid < 0:
                return REJECT
        return sid

    def accepting(self, sid: int) -> bool:
        """Whether the text so far is a complete JSON value of the schema (EOS may come now)."""
        st = self._states[sid]
        if st == (("D",),):
            return True
        return len(st) == 1 and st[0][0] == "N" and st[0][1] in NUMBER_DONE

    def closed(self, sid: int) -> bool:
        """Whether nothing but EOS can follow (the top-level value has closed)."""
        return self._states[sid] == (("D",),)

    def distance(self, sid: int) -> int:
        """The fewest bytes after which the text is complete (0 when accepting)."""
        d = self._dist.get(sid)
        if d is None:
            st = self._states[sid]
            d = self._dist[sid] = sum(self._frame_cost(st, i) for i in range(len(st)))
        return d

    def matches(self, text: bytes) -> bool:
        """Whether `text` is a complete JSON text of the schema (the automaton's own judgement)."""
        sid = self.feed(self.start, text)
        return sid >= 0 and self.accepting(sid)

    # ---- transitions ---------------------------------------------------------------------------
    def _depth(self, st: tuple) -> int:
        return sum(1 for f in st if f[0] in ("O", "A"))

    def _complete(self, st: tuple) -> tuple:
        """The stack after the value on top of `st` has finished."""
        rest = st[:-1]
        if not rest:
            return (("D",),)
        p = rest[-1]
        if p[0] == "O":
            return rest[:-1] + (("O", p[1], "next", p[3], None, 0),)
        return rest[:-1] + (("A", p[1], "next", 0),)

    def _ws(self, st: tuple, frame: tuple, pos: int):
        """The stack with the whitespace count at frame[pos] raised, or None past the limit."""
        if frame[pos] >= self.max_ws:
            return None
        return st[:-1] + (frame[:pos] + (frame[pos] + 1,) + frame[pos + 1:],)

    def _step(self, st: tuple, c: int):
        f = st[-1]
        tag = f[0]
        if tag == "V":
            return self._value(st, f, c)
        if tag == "S":
            return self._string(st, f, c)
        if tag == "K":
            return self._key(st, f, c)
        if tag == "N":
            return self._number(st, f, c)
        if tag == "L":
            if c != f[1][0]:
                return None
            return self._complete(st) if len(f[1]) == 1 else st[:-1] + (("L", f[1][1:]),)
        if tag == "O":
            return self._object(st, f, c)
        if tag == "A":
            return self._array(st, f, c)
        return None  # 'D': only EOS

    def _value(self, st, f, c):
        node = self.schema.node(f[1])
        kind = node.kind
        anyv = kind == "any"
        base = st[:-1]
        if c in WS:
            return self._ws(st, f, 2)
        if c == 0x7B and (kind == "object" or anyv) and self._depth(st) < self.max_depth:  # {
            return base + (("O", f[1], "open", frozenset(), None, 0),)
        if c == 0x5B and (kind == "array" or anyv) and self._depth(st) < self.max_depth:  # [
            return base + (("A", f[1], "open", 0),)
        if c == 0x22 and (kind == "string" or anyv):  # "
            return base + (("S", "v", 0, 0, None),)
        if (c == 0x2D or c in DIGITS) and (kind in ("number", "integer") or anyv):
            phase = "sign" if c == 0x2D else "zero" if c == 0x30 else "int"
            return base + (("N", phase, kind == "integer", 1 if phase == "int" else 0),)
        lit = LITERALS.get(c)
        if lit is not None and (anyv or kind == lit[1]):
            return base + (("L", lit[0]),)
        return None

    def _string(self, st, f, c):
        _, role, esc, hexleft, utf = f
        if utf is not None:
            left, lo, hi = utf
            if not lo <= c <= hi:
                return None
            return st[:-1] + (("S", role, 0, 0, None if left == 1 else (left - 1, 0x80, 0xBF)),)
        if hexleft:
            return st[:-1] + (("S", role, 0, hexleft - 1, None),) if c in HEX else None
        if esc:
            if c == 0x75:  # \u
                return st[:-1] + (("S", role, 0, 4, None),)
            return st[:-1] + (("S", role, 0, 0, None),) if c in ESCAPES else None
        if c == 0x22:
            if role == "v":
                return self._complete(st)
            p = st[-2]
            return st[:-2] + (("O", p[1], "colon", p[3], None, 0),)
        if c == 0x5C:
            return st[:-1] + (("S", role, 1, 0, None),)
        if c < 0x20:
            return None  # JSON strings cannot hold raw control characters
        if c < 0x80:
            return st
        lead = _utf8_lead(c)
        return None if lead is None else st[:-1] + (("S", role, 0, 0, lead),)

    def _candidates(self, obj: tuple):
        node = self.schema.node(obj[1])
        return [(k, j) for k, j in node.props if k not in obj[3]]

    def _key(self, st, f, c):
        obj = st[-2]
        prefix = f[1]
        cands = self._candidates(obj)
        if c == 0x22:
            for k, _ in cands:
                if k == prefix:
                    return st[:-2] + (("O", obj[1], "colon", obj[3] | {k}, k, 0),)
            return None
        longer = prefix + bytes((c,))
        if any(k.startswith(longer) for k, _ in cands):
            return st[:-1] + (("K", longer),)
        return None

    def _number(self, st, f, c):
        _, phase, int_only, digits = f
        nxt = None
        if c in DIGITS:
            nxt = {"sign": "zero" if c == 0x30 else "int", "int": "int", "dot": "frac", "frac": "frac",
                   "exp": "exp_digits", "exp_sign": "exp_digits", "exp_digits": "exp_digits"}.get(phase)
        elif c == 0x2E and not int_only and phase in ("zero", "int"):
            nxt = "dot"
        elif c in (0x65, 0x45) and not int_only and phase in ("zero", "int", "frac"):
            nxt = "exp"
        elif c in (0x2B, 0x2D) and phase == "exp":
            nxt = "exp_sign"
        if nxt is not None:
            n = 0
            if nxt in MAX_DIGITS:
                n = digits + 1 if nxt == phase else 1
                if n > MAX_DIGITS[nxt]:
                    nxt = None
            if nxt is not None:
                return st[:-1] + (("N", nxt, int_only, n),)
        if phase in NUMBER_DONE:  # the byte ends the number and belongs to the container
            after = self._complete(st)
            return None if after == (("D",),) else self._step(after, c)
        return None

    def _object(self, st, f, c):
        _, node_i, phase, seen, key, ws = f
        node = self.schema.node(node_i)
        base = st[:-1]
        if c in WS and phase in ("open", "key", "colon", "next"):
            return self._ws(st, f, 5)
        if c == 0x22 and phase in ("open", "key"):
            inkey = ("O", node_i, "inkey", seen, None, 0)
            if node.constrained:
                return base + (inkey, ("K", b"")) if self._candidates(f) else None
            return base + (inkey, ("S", "k", 0, 0, None))
        if c == 0x7D and phase in ("open", "next"):  # }
            return self._complete(st) if node.required <= seen else None
        if c == 0x2C and phase == "next":  # ,
            if node.constrained and not self._candidates(f):
                return None
            return base + (("O", node_i, "key", seen, None, 0),)
        if c == 0x3A and phase == "colon":  # :
            child = dict(node.props)[key] if node.constrained else 0
            return base + (("O", node_i, "value", seen, None, 0), ("V", child, 0))
        return None

    def _array(self, st, f, c):
        _, node_i, phase, ws = f
        node = self.schema.node(node_i)
        base = st[:-1]
        if c in WS and phase in ("open", "next"):
            return self._ws(st, f, 3)
        if c == 0x5D and phase in ("open", "next"):  # ]
            return self._complete(st)
        if c == 0x2C and phase == "next":
            return base + (("A", node_i, "value", 0), ("V", node.items, 0))
        if phase == "open":  # the first item starts with this byte
            return self._step(base + (("A", node_i, "value", 0), ("V", node.items, 0)), c)
        return None

    # ---- distance to completion ------------------------------------------------------------------
    def min_value(self, node_i: int) -> int:
        """Bytes of the shortest JSON text of schema node node_i."""
        node = self.schema.node(node_i)
        if node.kind == "object":
            return 1 + self._object_rest(node, frozenset(), first=True)
        return MIN_VALUE[node.kind]

    def _entry(self, node, key: bytes) -> int:
        return len(key) + 2 + 1 + self.min_value(dict(node.props)[key])  # "key":value

    def _object_rest(self, node, seen: frozenset, first: bool) -> int:
        """Bytes to close an object whose written keys are `seen` (first: no entry written yet)."""
        if not node.constrained:
            return 1
        todo = [k for k in node.required if k not in seen]
        return sum(self._entry(node, k) for k in todo) + max(len(todo) - (1 if first else 0), 0) + 1

    def _frame_cost(self, st: tuple, i: int) -> int:
        f = st[i]
        tag = f[0]
        if tag == "V":
            return self.min_value(f[1])
        if tag == "S":
            pending = f[4][0] if f[4] is not None else f[3] if f[3] else 1 if f[2] else 0
            return pending + 1
        if tag == "K":
            obj = st[i - 1]
            node = self.schema.node(obj[1])
            return min(len(k) - len(f[1]) + 2 + self.min_value(j) + self._object_rest(node, obj[3] | {k}, False)
                       for k, j in self._candidates(obj) if k.startswith(f[1]))
        if tag == "N":
            return 0 if f[1] in NUMBER_DONE else 1
        if tag == "L":
            return len(f[1])
        if tag == "A":
            return 1
        if tag == "O":
            node = self.schema.node(f[1])
            phase, seen = f[2], f[3]
            if phase == "open":
                return self._object_rest(node, seen, first=True)
            if phase == "key":
                if not node.constrained:
                    return 5  # "":0}
                todo = [k for k in node.required if k not in seen]
                if todo:
                    return self._object_rest(node, seen, first=True)
                return min(self._entry(node, k) for k, _ in self._candidates(f)) + 1
            if phase == "inkey":
                return 0 if node.constrained else 3  # K accounts for a constrained key; else :0}
            if phase == "colon":
                child = dict(node.props)[f[4]] if node.constrained else 0
                return 1 + self.min_value(child) + self._object_rest(node, seen, first=False)
            return self._object_rest(node, seen, first=False)  # value, next
        return 0


__all__ = ["JsonGrammar", "REJECT"]
