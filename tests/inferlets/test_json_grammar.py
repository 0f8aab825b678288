"""The JSON pushdown automaton: agrees with json.loads, enforces the schema subset and the limits,
never dead-ends, and its distance-to-completion is exact (checked by breadth-first search)."""

from __future__ import annotations

import collections
import json
import random
import re

import pytest

from piegpu import ValidationError
from piegpu.inferlets.json_grammar import JsonGrammar
from piegpu.inferlets.json_schema import validate

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "height": {"type": "number"}, "pet": {"type": "boolean"},
                                           "tags": {"type": "array", "items": {"type": "string"}},
                                           "home": {"type": "object", "properties": {"city": {"type": "string"}},
                                                    "required": ["city"]}},
          "required": ["name", "age", "home"]}


def random_value(rng: random.Random, depth: int = 0):
    kinds = ["str", "int", "float", "bool", "null"] + (["list", "dict"] if depth < 4 else [])
    k = rng.choice(kinds)
    if k == "str":
        return "".join(rng.choice('ab "\\\n\t\u00e9\u4e2d\U0001f600/\x01') for _ in range(rng.randint(0, 6)))
    if k == "int":
        return rng.randint(-10 ** 6, 10 ** 6)
    if k == "float":
        return rng.choice([0.5, -1e-7, 3.25e10, 123.456, -0.0])
    if k == "bool":
        return rng.random() < 0.5
    if k == "null":
        return None
    if k == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}{rng.choice('xyz')}": random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def test_accepts_every_serialised_value():
    g = JsonGrammar({})
    rng = random.Random(0)
    for i in range(300):
        v = random_value(rng)
        for text in (json.dumps(v), json.dumps(v, ensure_ascii=False), json.dumps(v, separators=(",", ":"))):
            assert g.matches(text.encode("utf-8")), text


def test_agrees_with_json_loads_on_mutated_texts():
    """Random byte edits of valid texts: the automaton accepts exactly what json.loads parses, within its
    limits (whitespace runs <= 4, <= 16 digits per number part, <= 3 exponent digits, nothing after the
    top-level value)."""
    g = JsonGrammar({})
    rng = random.Random(1)
    alphabet = b'{}[],:"\\ 0123456789.eE+-truefalsnu\xc3\xa9\xe4\xb8\xad\x80\xff'
    checked = accepted = 0
    for i in range(1500):
        text = bytearray(json.dumps(random_value(rng), ensure_ascii=rng.random() < 0.5).encode())
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(3)
            pos = rng.randrange(len(text) + 1)
            if op == 0:
                text.insert(pos, rng.choice(alphabet))
            elif op == 1 and text:
                del text[min(pos, len(text) - 1)]
            elif text:
                text[min(pos, len(text) - 1)] = rng.choice(alphabet)
        text = bytes(text)
        try:
            json.loads(text.decode("utf-8"))
            parses = True
        except (UnicodeDecodeError, ValueError):
            parses = False
        within_limits = not (re.search(rb"[ \t\n\r]{5,}", text) or re.search(rb"[0-9]{17,}", text)
                             or re.search(rb"[eE][+-]?[0-9]{4,}", text) or text[-1:].isspace())
        got = g.matches(text)
        accepted += got
        assert got == (parses and within_limits), text
        checked += 1
    assert accepted > 200 and checked == 1500


def test_prefixes_never_dead_end():
    """Every prefix the automaton accepts can still be completed (distance is finite) and some byte continues it."""
    for schema in (None, {}, PERSON, {"type": "array", "items": PERSON["properties"]["home"]}):
        g = JsonGrammar(schema)
        rng = random.Random(2)
        for _ in range(200):
            sid = g.start
            for _ in range(rng.randint(0, 60)):
                nxt = [b for b in range(256) if g.step(sid, b) >= 0]
                if not nxt:  # only EOS can follow, so the text must be complete
                    assert g.accepting(sid), g.stack(sid)
                    break
                sid = g.step(sid, rng.choice(nxt))
            assert g.distance(sid) < 10 ** 6
            assert g.accepting(sid) or any(g.step(sid, b) >= 0 for b in range(256))


def test_distance_is_exact():
    g = JsonGrammar(PERSON)
    alphabet = sorted(set(b'"{}[],:-0.eE+truefalsn\\u a') | set(b"nameaghtpsocity"))

    def bfs(sid: int) -> int:
        seen = {sid: 0}
        q = collections.deque([sid])
        while q:
            s = q.popleft()
            if g.accepting(s):
                return seen[s]
            for c in alphabet:
                n = g.step(s, c)
                if n >= 0 and n not in seen:
                    seen[n] = seen[s] + 1
                    q.append(n)
        raise AssertionError("no completion")
    rng = random.Random(3)
    prefixes = [b'{"name": "x", "age": 1, "home": {"ci', b'{"ho', b'{"tags": ["a", "b"', b'{"age": -',
                b'{"height": 1.5e', b'{"pet": tr', b'{"name": "\\u12']
    for _ in range(12):
        sid = g.start
        for _ in range(rng.randint(0, 25)):
            nxt = [c for c in alphabet if g.step(sid, c) >= 0]
            sid = g.step(sid, rng.choice(nxt))
        prefixes.append(sid)
    for p in prefixes:
        sid = g.feed(g.start, p) if isinstance(p, bytes) else p
        assert sid >= 0
        assert g.distance(sid) == bfs(sid), g.stack(sid)


def test_schema_mode():
    g = JsonGrammar(PERSON)
    ok = [{"name": "A", "age": 3, "home": {"city": "B"}},
          {"home": {"city": ""}, "tags": ["x"], "age": -0, "name": "\u00e9", "pet": False, "height": 1e3}]
    for v in ok:
        assert g.matches(json.dumps(v).encode()) and not validate(v, PERSON)
    bad = ['{"name": "A", "age": 3}',  # missing required
           '{"name": "A", "age": 3.5, "home": {"city": "B"}}',  # integer
           '{"name": 1, "age": 3, "home": {"city": "B"}}',
           '{"name": "A", "age": 3, "home": {"city": "B"}, "extra": 1}',  # undeclared key
           '{"name": "A", "name": "B", "age": 3, "home": {"city": "B"}}',  # repeated key
           '{"name": "A", "age": 3, "home": {}}',
           '{"name": "A", "age": 3, "home": {"city": "B"}, }',
           '[1]', '"x"']
    for text in bad:
        assert not g.matches(text.encode()), text
    assert JsonGrammar({"type": "integer"}).matches(b"-120") and not JsonGrammar({"type": "integer"}).matches(b"1.0")
    assert JsonGrammar(None).matches(b'{"any": [1, {"x": null}]}') and not JsonGrammar(None).matches(b"[1]")


def test_limits():
    g = JsonGrammar({}, max_whitespace=2)
    assert g.matches(b'[ 1,  2]') and not g.matches(b'[   1]')
    assert g.matches(b"1" * 16) and not g.matches(b"1" * 17)
    assert not g.matches(b"[" * 13 + b"]" * 13)  # nesting beyond max_depth
    assert g.matches(b'"\xe4\xb8\xad"') and not g.matches(b'"\xe4\xb8"') and not g.matches(b'"\xc0\x80"')
    assert not g.matches(b'"\xed\xa0\x80"')  # an encoded UTF-16 surrogate is not UTF-8
    assert not g.matches(b'"a\nb"') and g.matches(b'"a\\nb"')
    assert not g.matches(b"01") and not g.matches(b"1.") and not g.matches(b"tru")


@pytest.mark.parametrize("schema,match", [
    ({"type": "strin"}, "type 'strin' is not supported"),
    ({"type": ["string", "null"]}, "not supported"),
    ({"type": "object", "patternProperties": {}}, "unsupported keywords"),
    ({"type": "string", "properties": {}}, "do not apply"),
    ({"properties": {"a": {}}}, "need a 'type'"),
    ({"type": "object", "required": "a"}, "'required' must be a list"),
    ({"type": "object", "properties": {'a"b': {}}}, "needs escaping"),
    ([1], "expected an object"),
])
def test_bad_schema_is_a_clear_error(schema, match):
    with pytest.raises(ValidationError, match=match):
        JsonGrammar(schema)
