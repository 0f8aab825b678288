"""Grammar-constrained decoding on llguidance, on the default model (lavapipe, real passes).

Ten JSON Schemas of increasing difficulty validate with `jsonschema`; a GBNF arithmetic grammar and
an ISO-date regex produce only matching strings over 20 seeded samples; invalid input is a
ValidationError with llguidance's message before any pass; a grammar that cannot finish within
max_tokens ends with finish reason "length" and the partial text; the host API (Constraint,
Matcher) works on its own.
"""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

from piegpu import ValidationError
from piegpu.inferlets.grammar import Constraint, closed_objects
from piegpu.inferlets.token_mask import unpack_mask

SCHEMAS = [
    ("flat", {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}},
              "required": ["name"]}),
    ("two types", {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                      "population": {"type": "integer", "minimum": 0,
                                                                     "maximum": 100000000}},
                   "required": ["city", "population"]}),
    ("enum", {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                               "bright": {"type": "boolean"}},
              "required": ["color", "bright"]}),
    ("bounded number", {"type": "object", "properties": {"temperature": {"type": "number", "minimum": -50,
                                                                         "maximum": 60}},
                        "required": ["temperature"]}),
    ("array min/max", {"type": "object", "properties": {"fruits": {
        "type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 2, "maxItems": 3}},
        "required": ["fruits"]}),
    ("nested", {"type": "object", "properties": {"person": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"]}}, "required": ["person"]}),
    ("pattern", {"type": "object", "properties": {"date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
                                                  "code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                 "required": ["date", "code"]}),
    ("anyOf", {"type": "object", "properties": {"id": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 999},
                                                               {"type": "string", "pattern": "^[a-z]{1,6}$"}]}},
               "required": ["id"]}),
    ("$ref", {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9,
                                                                         "maximum": 9},
                                                                   "y": {"type": "integer", "minimum": -9,
                                                                         "maximum": 9}},
                                  "required": ["x", "y"]}},
              "type": "object", "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
              "required": ["start", "end"]}),
    ("all of it", {"$defs": {"item": {"type": "object", "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"},
        "qty": {"type": "integer", "minimum": 1, "maximum": 9},
        "kind": {"enum": ["book", "pen"]}}, "required": ["sku", "qty", "kind"]}},
        "type": "object", "properties": {
            "order": {"type": "object", "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 2},
                "total": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1000}, {"type": "null"}]}},
                "required": ["items", "total"]}},
        "required": ["order"]}),
]


@pytest.mark.parametrize("mode", ["device", "host"])
@pytest.mark.parametrize("name,schema", SCHEMAS, ids=[n for n, _ in SCHEMAS])
def test_json_schemas_validate(default_model, name, schema, mode):
    g = default_model.generate(f"Give an example as JSON ({name}).", chat=True, max_tokens=64, json_schema=schema,
                               grammar_mode=mode)
    text = g.run()
    value = json.loads(text)
    jsonschema.validate(value, schema)
    assert g.stats.grammar == mode and g.finish_reason == "stop"
    if mode == "host":
        assert g.grammar_stats.masks >= 1


def test_gbnf_arithmetic_over_20_seeded_samples(default_model):
    gbnf = 'root ::= expr\nexpr ::= term (op term)*\nop ::= "+" | "-" | "*"\nterm ::= [0-9]{1,3} | "(" expr ")"\n'
    for seed in range(20):
        g = default_model.generate("Write a sum:", max_tokens=8, grammar=gbnf, sampler="temperature", seed=seed)
        text = g.run()
        assert is_expr(text), (seed, text)


def is_expr(text: str) -> bool:
    """Whether text is an expr of the arithmetic grammar (a recursive-descent recognizer)."""
    def term(i):
        if i < len(text) and text[i] == "(":
            j = expr(i + 1)
            return j + 1 if j is not None and j < len(text) and text[j] == ")" else None
        m = re.match(r"[0-9]{1,3}", text[i:])
        return i + m.end() if m else None

    def expr(i):
        i = term(i)
        while i is not None and i < len(text) and text[i] in "+-*":
            i = term(i + 1)
        return i
    return expr(0) == len(text)


def test_iso_date_regex_over_20_seeded_samples(default_model):
    iso = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    seen = set()
    for seed in range(20):
        g = default_model.generate("The date today is", max_tokens=16, regex=iso, sampler="top-p", top_p=0.95,
                                   seed=seed)
        text = g.run()
        assert re.fullmatch(iso, text), (seed, text)
        seen.add(text)
    assert len(seen) > 1  # seeded sampling, not one forced string


@pytest.mark.parametrize("kwargs,match", [
    ({"regex": "a(b"}, "unclosed group"),
    ({"grammar": "root ::= foo"}, "Rule 'foo' not found"),
    ({"grammar": "start: \"a\" \"b"}, "grammar: "),
    ({"json_schema": {"type": "foo"}}, "json_schema: .*foo"),
    ({"json_schema": "{not json"}, "not valid JSON text"),
    ({"regex": "a", "json_object": True}, "pass one constraint"),
])
def test_bad_grammars_fail_before_any_pass(default_model, kwargs, match):
    before = default_model.default_pipeline.stats.submits
    with pytest.raises(ValidationError, match=match):
        default_model.generate("x", **kwargs)
    assert default_model.default_pipeline.stats.submits == before


def test_unsatisfiable_within_max_tokens_is_length_with_partial_text(default_model):
    g = default_model.generate("Spell it:", max_tokens=3, regex="[a-z]{60}")
    text = g.run()
    assert g.finish_reason == "length" and g.stats.stop_reason == "max_tokens"
    assert 0 < len(text) < 60 and re.fullmatch("[a-z]+", text)


def test_every_sampler_and_chat(default_model):
    for opts in ({"sampler": "top-k", "top_k": 20, "temperature": 0.8}, {"sampler": "min-p", "min_p": 0.1},
                 {"sampler": "temperature", "xtc_probability": 0.5, "dry_multiplier": 0.8, "top_n_sigma": 2.0},
                 {"sampler": "mirostat", "mirostat": 5.0}):
        g = default_model.generate("Describe a cat.", chat=True, max_tokens=40, json_object=True, seed=4, **opts)
        assert isinstance(json.loads(g.run()), dict), opts


def test_budget_closing_finishes_an_open_value(default_model):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
              "required": ["n", "s"]}
    g = default_model.generate("Count to a million in JSON:", max_tokens=16, json_schema=schema)
    value = json.loads(g.run())
    jsonschema.validate(value, schema)


def test_constraint_host_api(default_model):
    tok = default_model.tokenizer
    V = default_model.config.vocab_size
    c = Constraint.from_request(default_model, regex="ab[0-9]")
    assert Constraint.from_request(default_model) is None
    m = c.matcher()
    ab, seven = tok.token_to_id("ab"), tok.token_to_id("7")
    assert m.forced_tokens() == [ab]  # "ab" is one token: forced
    buf = np.zeros(c.words, np.uint32)
    m.mask_into(buf)
    assert np.flatnonzero(unpack_mask(buf, V)).tolist() == [ab]
    m.consume(ab)
    digits = [tok.token_to_id(str(d)) for d in range(10)]
    assert np.flatnonzero(unpack_mask(m.mask(), V)).tolist() == sorted(digits)
    branches = m.branches(m.mask())  # ten allowed tokens: each branch's next mask is ready
    assert sorted(branches) == sorted(digits) and all(b.is_done() for b in branches.values())
    with pytest.raises(ValidationError, match="not allowed"):
        c.matcher().consume(tok.token_to_id("x"))
    m.consume(seven)
    assert m.is_done() and m.is_accepting()
    with pytest.raises(ValidationError, match="np.uint32"):
        m.mask_into(np.zeros(3, np.int64))
    c2 = Constraint.from_request(tokenizer=tok, vocab_size=V, json_object=True)
    first = np.flatnonzero(unpack_mask(c2.matcher().mask(), V))
    assert c2.kind == "json_object" and tok.token_to_id("{") in first and all(
        tok.decode([int(t)]).startswith("{") for t in first)


def test_closed_objects_follow_llama_cpp():
    s = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}},
                                          "properties": {"type": "string"}},
         "$defs": {"d": {"properties": {"x": {}}, "additionalProperties": True}}}
    c = closed_objects(s)
    assert c["additionalProperties"] is False and c["properties"]["a"]["additionalProperties"] is False
    assert "additionalProperties" not in c["properties"]["properties"]  # a property named "properties"
    assert c["$defs"]["d"]["additionalProperties"] is True and "additionalProperties" not in s


def test_batched_rows_apply_their_grammars(default_model):
    """generate_batch and n samples: each row's own matcher masks it on the device; greedy rows equal them alone."""
    schema = SCHEMAS[2][1]
    prompts = [f"Give an example as JSON ({n})." for n in ("enum", "colors")]
    gens = default_model.generate_batch(prompts, chat=True, max_tokens=40, json_schema=schema)
    for p, g in zip(prompts, gens):
        jsonschema.validate(json.loads(g.text), schema)
        alone = default_model.generate(p, chat=True, max_tokens=40, json_schema=schema)
        assert g.text == alone.run()
    iso = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    texts = default_model.generate("The date today is", n=4, max_tokens=16, regex=iso, sampler="top-p", top_p=0.95,
                                   seed=3).run()
    assert all(re.fullmatch(iso, t) for t in texts), texts


def test_chat_turns_on_one_working_set(default_model):
    ws = default_model.working_set(512)
    first = default_model.generate("Pick a number from 1 to 9.", chat=True, working_set=ws, max_tokens=4,
                                   regex="[1-9]")
    assert re.fullmatch("[1-9]", first.run())
    again = default_model.generate("Now a color as JSON.", chat=True, working_set=ws, max_tokens=32,
                                   json_schema={"type": "object", "properties": {"color": {"enum": ["red", "blue"]}},
                                                "required": ["color"]})
    assert json.loads(again.run())["color"] in ("red", "blue")
    assert default_model.session(ws).tokens[-len(again.tokens) + 1:] == again.tokens[:-1]


def test_lark_and_gbnf_forms(default_model):
    tok = default_model.tokenizer
    V = default_model.config.vocab_size
    yes_no = {tok.token_to_id("yes"), tok.token_to_id("no")}
    for req in ({"lark": 'start: "yes" | "no"'}, {"grammar": 'start: "yes" | "no"'},
                {"grammar": 'root ::= "yes" | "no"'}):
        first = set(np.flatnonzero(unpack_mask(Constraint.from_request(default_model, **req).matcher().mask(),
                                               V)).tolist())
        assert yes_no <= first and all("yes".startswith(tok.decode([t])) or "no".startswith(tok.decode([t]))
                                        for t in first), req


def test_cli_grammar_flags(default_model, tmp_path, capsys):
    from piegpu.cli import main
    assert main(["generate", "The year:", "--regex", "(19|20)[0-9]{2}", "--max-tokens", "8"]) == 0
    out = capsys.readouterr()
    assert re.fullmatch(r"(19|20)[0-9]{2}", out.out.strip()) and "piegpu: regex:" in out.err
    gbnf = tmp_path / "sum.gbnf"
    gbnf.write_text('root ::= [0-9] "+" [0-9]\n')
    assert main(["generate", "Add:", "--grammar", str(gbnf), "--max-tokens", "6"]) == 0
    assert re.fullmatch(r"[0-9]\+[0-9]", capsys.readouterr().out.strip())
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}))
    assert main(["generate", "Is it ok? JSON:", "--json-schema", str(schema), "--max-tokens", "12"]) == 0
    assert isinstance(json.loads(capsys.readouterr().out)["ok"], bool)
    # bad input fails before the model loads (exit 2, llguidance's message)
    assert main(["generate", "x", "--regex", "a(b"]) == 2
    assert "unclosed group" in capsys.readouterr().err
    gbnf.write_text("root ::= nothing\n")
    assert main(["generate", "x", "--grammar", str(gbnf)]) == 2
    assert "Rule 'nothing' not found" in capsys.readouterr().err
    assert main(["generate", "x", "--regex", "a", "--json"]) == 2
    assert "pass one of" in capsys.readouterr().err
