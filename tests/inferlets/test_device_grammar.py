"""Device grammars: token automata (outlines-core) masked and advanced in the epilogue, on the default model.

The oracle for the device path is the same automaton run on the host: the depth-1 host loop
(grammar_loop.constrained_pieces) with a matcher that reads the automaton's tables -- the tokens must be identical,
greedy and seeded. The peer checks: the automaton's language against Python's `re` on sampled strings, its masks
against llguidance's on the same regex (llguidance's are inside them), the range regexes against integer arithmetic, outputs against `jsonschema`.
"""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction

import jsonschema
import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.inferlets import automaton as A
from piegpu.inferlets.schema_regex import int_range_regex, number_range_regex, schema_regex

TOOL = {"type": "object", "properties": {"location": {"type": "string", "maxLength": 24},
                                         "unit": {"enum": ["celsius", "fahrenheit"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["location", "unit", "days"]}
SCHEMAS = [
    TOOL,
    {"type": "object", "properties": {"temp": {"type": "number", "minimum": -50, "maximum": 60},
                                      "ok": {"type": "boolean"}}, "required": ["temp", "ok"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                               "minItems": 1, "maxItems": 3},
                                      "id": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}},
     "required": ["tags", "id"]},
    {"type": "object", "properties": {"date": {"type": "string", "format": "date"},
                                      "code": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": ["date", "code"]},
]
REGEXES = [r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", r"(yes|no|maybe)", r"[a-z]+( [a-z]+){0,4}\.",
           r"\+?[0-9]{1,3}-[0-9]{3}-[0-9]{4}"]


class AutomatonMatcher:
    """The host oracle: grammar_loop's matcher interface over an automaton's tables (no forced tokens)."""

    def __init__(self, a):
        self.a, self.state = a, 0
        self.words = (a.class_of.size + 31) // 32

    def mask_into(self, buf):
        bits = np.zeros(self.words * 32, np.uint8)
        bits[:self.a.class_of.size] = self.a.allowed(self.state)
        buf[:] = np.packbits(bits, bitorder="little").view(np.uint32)

    def branches(self, mask, limit=16):
        return {}

    def consume(self, tok):
        nxt = self.a.next(self.state, tok)
        assert nxt >= 0, f"token {tok} not allowed"
        self.state = nxt

    def forced_tokens(self):
        return []

    def completion(self, limit):
        return self.a.completion(self.state, limit)

    def is_done(self):
        return self.a.is_done(self.state)


class AutomatonConstraint:
    def __init__(self, a):
        self.a = a

    def matcher(self):
        return AutomatonMatcher(self.a)


def _both(model, prompt, **kw):
    """(device generation, host-oracle generation) of one request, run."""
    dev = model.generate(prompt, grammar_mode="device", **kw)
    dev.run()
    host = model.generate(prompt, grammar_mode="host", **kw)
    host.constraint = AutomatonConstraint(dev.grammar.automaton)  # the same automaton, masks from the host
    host.run()
    return dev, host


def test_range_regexes_equal_arithmetic():
    rnd = random.Random(0)
    cases = [(0, None), (1, 14), (-9, 9), (None, None), (None, -3), (-120, -7), (99, None), (0, 0)]
    cases += [tuple(sorted((rnd.randint(-3000, 3000), rnd.randint(-3000, 3000)))) for _ in range(25)]
    for lo, hi in cases:
        r = re.compile(int_range_regex(lo, hi))
        for n in range(-3500, 3500):
            assert (r.fullmatch(str(n)) is not None) == ((lo is None or n >= lo) and (hi is None or n <= hi)), \
                (lo, hi, n)
        assert not r.fullmatch("01") and not r.fullmatch("-0")
        num = re.compile(number_range_regex(lo, hi))
        for t in (f"{n}.{f}" for n in range(-400, 400, 7) for f in ("0", "5", "25")):
            if num.fullmatch(t):  # it narrows: whatever it allows is in range
                assert (lo is None or Fraction(t) >= lo) and (hi is None or Fraction(t) <= hi), (lo, hi, t)


def test_automaton_language_equals_re(default_model):
    from piegpu.textgen.grammar_run import _pieces
    pieces, key = _pieces(default_model)
    rng = np.random.default_rng(0)
    for rx in REGEXES + [schema_regex(s) for s in SCHEMAS]:
        a = A.build(rx, pieces, default_model.config.eos_token_ids, key)
        assert a.table.shape == (a.states, a.classes) and a.nbytes < 1 << 20
        for _ in range(25):  # random walks: every accepted string matches, every step keeps a match reachable
            st, text = 0, b""
            for _ in range(80):
                allowed = np.flatnonzero(a.allowed(st))
                assert allowed.size, "a live state allows something"
                tok = int(rng.choice(allowed))
                if tok in default_model.config.eos_token_ids:
                    break
                text += pieces[tok]
                st = a.next(st, tok)
            if a.accepting[st]:
                assert re.fullmatch(rx, text.decode()), (rx, text)
            path = a.completion(st, 10_000)  # the shortest completion finishes every prefix
            done = text + b"".join(pieces[t] for t in path)
            assert re.fullmatch(rx, done.decode()), (rx, done)
        assert not a.allowed(0)[default_model.config.eos_token_ids[0]] or re.fullmatch(rx, "")


def test_masks_within_llguidance_on_the_same_regex(default_model):
    import llguidance
    from piegpu.inferlets.grammar import Constraint
    from piegpu.inferlets.token_mask import unpack_mask
    V = default_model.config.vocab_size
    for rx in REGEXES[:3]:
        g = default_model.generate("Answer:", regex=rx, max_tokens=24, sampler="top-p", top_p=0.95, seed=5,
                                   grammar_mode="device")
        g.run()
        a = g.grammar.automaton
        m = Constraint.from_request(default_model, regex=rx).matcher()
        st = 0
        for tok in list(g.tokens):
            ll = unpack_mask(m.mask(), V)
            # llguidance allows only the canonical tokens where the grammar forces bytes ("y" -> "es", not "e"):
            # its mask is inside the automaton's, and it accepts every token the device drew
            assert not (ll & ~a.allowed(st)).any(), (rx, tok, np.flatnonzero(ll & ~a.allowed(st))[:5])
            m.consume(tok)
            st = a.next(st, tok)
        assert llguidance is not None and re.fullmatch(rx, g.text)


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_device_equals_host_oracle_and_validates(default_model, i):
    schema = SCHEMAS[i]
    for kw in ({}, {"sampler": "top-p", "top_p": 0.9, "temperature": 0.8, "seed": 11 + i}):
        dev, host = _both(default_model, "Reply in JSON.", chat=True, max_tokens=48, json_schema=schema, window=4,
                          **kw)
        assert dev.stats.grammar == "device" and dev.tokens == host.tokens, (kw, dev.text, host.text)
        jsonschema.validate(json.loads(dev.text), schema)
        assert dev.stats.host_waits < len(dev.tokens)  # run ahead: fewer waits than tokens


def test_regex_device_equals_host_oracle_with_budget_closing(default_model):
    for rx, n in ((REGEXES[0], 16), (REGEXES[2], 6)):
        dev, host = _both(default_model, "Write:", regex=rx, max_tokens=n, sampler="min-p", min_p=0.05, seed=2,
                          window=8)
        assert dev.tokens == host.tokens and re.fullmatch(rx, dev.text), (dev.text, host.text)


def test_auto_mode_and_bad_input(default_model):
    rec = {"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"},
                                                            "next": {"anyOf": [{"$ref": "#/$defs/n"},
                                                                               {"type": "null"}]}}}},
           "$ref": "#/$defs/n"}
    for schema, why in ((rec, "recursive"), ({"type": "object", "properties": {"a": {"type": "integer"}},
                                              "minProperties": 1}, "minProperties"), ({"type": "string", "format": "hostname"}, "hostname")):
        with pytest.raises(ValidationError, match=why):
            default_model.generate("x", json_schema=schema, grammar_mode="device")
    with pytest.raises(ValidationError, match="GBNF|grammar= grammars run on the host"):
        default_model.generate("x", grammar='root ::= "a"', max_tokens=2, grammar_mode="device")
    with pytest.raises(ValidationError, match="(?i)unsatisfiable"):
        default_model.generate("x", json_schema={"type": "integer", "minimum": 5, "maximum": 2},
                               grammar_mode="device")
    with pytest.raises(ValidationError, match="grammar_mode must be one of"):
        default_model.generate("x", regex="a", grammar_mode="gpu")
    assert all(g.stats.grammar == "device" for g in
               default_model.generate_batch(["a", "b"], regex="[ab]", grammar_mode="device", max_tokens=2))
    with pytest.raises(ValidationError, match="over the"):
        from piegpu.textgen.grammar_run import _pieces
        pieces, key = _pieces(default_model)
        A.build("[a-z]{1,40}", pieces, [2], key, budget=1 << 10, disk=False)
    auto = default_model.generate("x", json_schema=TOOL, max_tokens=2)  # auto: llguidance, for now (grammar_run)
    assert auto.stats.grammar == "host" and "canonical" in auto.stats.grammar_reason
    assert default_model.generate("x", json_schema=TOOL, max_tokens=2, grammar_mode="device").stats.grammar == "device"


def test_tables_group_tokens_and_check_exactly():
    trans = {10: {0: 11, 1: 11, 2: 12, 5: 10}, 11: {2: 12}, 12: {9: 12}}  # 9 is EOS (outlines' form)
    class_of, table, accepting, eos = A.tables(trans, 10, {12}, 8, 9, (7,), never=[6])
    assert class_of[0] == class_of[1] != class_of[2] and class_of[6] == class_of[3] == 0
    assert table[0, class_of[0]] == 1 and table[1, class_of[2]] == 2 and table[0, class_of[3]] == -1
    assert accepting.tolist() == [False, False, True] and table[2, eos] == 2 and table[0, eos] == -1


def test_every_sampler_stage_composes_with_the_device_automaton(default_model):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                               "n": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["color", "n"]}
    for opts in ({"sampler": "temperature", "xtc_probability": 0.5, "dry_multiplier": 0.8, "top_n_sigma": 2.0},
                 {"sampler": "mirostat", "mirostat": 5.0}, {"repetition_penalty": 1.3, "presence_penalty": 0.5},
                 {"sampler": "top-k", "top_k": 20, "logit_bias": {29: -100.0}}):
        g = default_model.generate("Pick a color as JSON.", chat=True, max_tokens=30, json_schema=schema, seed=4,
                                   window=4, grammar_mode="device", **opts)
        jsonschema.validate(json.loads(g.run()), schema)
        assert g.stats.grammar == "device", opts


def test_batch_rows_carry_their_own_automata(default_model):
    """generate_batch with per-prompt schemas (None: a free row) beside free rows, two rows at a time so later prompts
    take over rows (handovers): every row equals its prompt alone, runs ahead, and validates; n= samples too."""
    small = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                              "n": {"type": "integer", "minimum": 0, "maximum": 99}},
             "required": ["color", "n"]}
    prompts = ["Pick a color as JSON.", "Say hi.", "Describe a trip as JSON.", "Another color as JSON."]
    schemas = [small, None, TOOL, small]
    gens = default_model.generate_batch(prompts, chat=True, max_tokens=32, json_schema=schemas, window=4,
                                        max_batch=2, grammar_mode="device")
    for p, schema, g in zip(prompts, schemas, gens):
        alone = default_model.generate(p, chat=True, max_tokens=32, window=4,
                                       **({"json_schema": schema, "grammar_mode": "device"} if schema else {}))
        assert g.text == alone.run(), p
        assert g.stats.grammar == ("device" if schema else None)
        if schema:
            jsonschema.validate(json.loads(g.text), schema)
    assert sum(g.stats.host_waits for g in gens) < sum(len(g.tokens) for g in gens)
    texts = default_model.generate("Pick a color as JSON.", chat=True, n=3, max_tokens=24, json_schema=small,
                                   sampler="top-p", top_p=0.95, seed=3, grammar_mode="device").run()
    for t in texts:
        jsonschema.validate(json.loads(t), small)
    with pytest.raises(ValidationError, match="one value per prompt"):
        default_model.generate_batch(["a", "b"], regex=["[ab]"], max_tokens=2)
