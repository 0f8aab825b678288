"""Grammar-constrained decoding on llguidance: GBNF, Lark, regex, JSON Schema and JSON mode.

The host side is llguidance (the engine behind Guidance, used by llama.cpp and vLLM): a
Constraint is one compiled grammar for one tokenizer; each sequence gets a Matcher that
writes the next-token bitmask (u32 words, bit i of word i // 32 = token i) and consumes the
drawn tokens. The device side is the epilogue: it unpacks the mask from a host->device
channel (token_mask.device_allowed), applies it before every sampler stage, and draws.

    c = Constraint.from_request(model, json_schema={"type": "object"})   # None without a constraint
    m = c.matcher()
    m.mask_into(buf)            # buf: np.uint32[c.words], the allowed next tokens
    m.consume(token)            # ValidationError (llguidance's message) if the grammar forbids it
    m.forced_tokens()           # tokens the grammar forces next (fast-forward; embed them unsampled)
    m.is_done()                 # nothing but EOS may follow

model.generate(..., grammar=/lark=/regex=/json_schema=/json_object=) on the host path (grammar_mode="host", or a
grammar the device automaton cannot take: textgen/grammar_run.py) runs grammar_loop.constrained_pieces(): a depth-1 loop (the mask for step t+1 needs token t, which the device draws in step t), where
forced tokens are prefilled in one pass each run instead of being sampled one by one.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass

import numpy as np

from ..errors import ValidationError

JSON_OPTIONS = {"whitespace_flexible": False}  # compact JSON: a small model cannot pad with endless whitespace
_LL_TOKENIZERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
REQUEST_KEYS = ("grammar", "lark", "regex", "json_schema", "json_object")
CLOSERS = ('"', "}", "]", ")", ",", "0", "1", "a", " ")  # what a budget completion tries first, in order


# llguidance's parser limits, raised where its defaults refuse grammars people send: a GBNF/regex alternation of more
# than 2000 literals (a product list, a choice of names) failed mid-generation with "Current row has 2001 items; max
# is 2000". Measured on the default model's 49152-token vocabulary (this VM, one run): 2001 alternatives build in 13 ms
# and compute a mask in 0.6 ms mean (2.3 ms max); 10000 in 150 ms, 4.0 ms mean (15 ms max); 50000 in 3.0 s, 21 ms mean
# (97 ms max) -- the cost grows with the alternation, nothing else pays it.
MAX_ITEMS_IN_ROW = 100_000
STEP_MAX_ITEMS = 200_000


def parser_limits():
    """The llguidance.LLParserLimits every matcher and validation uses (MAX_ITEMS_IN_ROW, STEP_MAX_ITEMS)."""
    return _llguidance().LLParserLimits(max_items_in_row=MAX_ITEMS_IN_ROW, step_max_items=STEP_MAX_ITEMS)


def _llguidance():
    try:
        import llguidance
        import llguidance.gbnf_to_lark  # noqa: F401  (grammar_from's GBNF converter)
    except ImportError:
        raise ValidationError("grammar-constrained decoding needs llguidance. Fix: pip install llguidance") from None
    return llguidance


def ll_tokenizer(tokenizer, vocab_size: int, eos_token_ids):
    """The llguidance LLTokenizer of a tokenizers.Tokenizer (built once per tokenizer, vocab and EOS ids)."""
    ll = _llguidance()
    key = (vocab_size, tuple(eos_token_ids))
    try:
        per = _LL_TOKENIZERS.setdefault(tokenizer, {})
    except TypeError:
        per = {}
    hit = per.get(key)
    if hit is None:
        to_str = getattr(tokenizer, "to_str", None)
        if not callable(to_str):
            raise ValidationError(f"grammars need a tokenizers.Tokenizer (tokenizer.json); got "
                                  f"{type(tokenizer).__name__}. Fix: load the model with its tokenizer.json")
        hit = per[key] = ll.LLTokenizer(to_str(), n_vocab=vocab_size, eos_token=list(eos_token_ids) or None)
    return hit


_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_ONE = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames",
        "unevaluatedProperties", "additionalItems")


def closed_objects(schema):
    """A copy of `schema` where an object schema with "properties" and no "additionalProperties" gets
    additionalProperties: false -- llama.cpp's json-schema-to-grammar reading (a small model otherwise
    invents extra keys); an explicit additionalProperties is kept."""
    if isinstance(schema, list):
        return [closed_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for k in _MAPS:
        if isinstance(out.get(k), dict):
            out[k] = {name: closed_objects(sub) for name, sub in out[k].items()}
    for k in _LISTS:
        if isinstance(out.get(k), list):
            out[k] = [closed_objects(sub) for sub in out[k]]
    for k in _ONE:
        if isinstance(out.get(k), (dict, list)):
            out[k] = closed_objects(out[k])
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _schema_text(schema) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValidationError(f"json_schema: not valid JSON text: {e}. Fix: pass a dict or JSON text") from None
    if isinstance(schema, (dict, bool)):
        try:
            return json.dumps(closed_objects(schema))
        except (TypeError, ValueError) as e:
            raise ValidationError(f"json_schema: not JSON data ({e}). Fix: dicts, lists, strings and numbers") from None
    raise ValidationError(f"json_schema: pass a dict or JSON text, got {type(schema).__name__}")


def grammar_text(grammar=None, lark=None, regex=None, json_schema=None, json_object: bool = False) -> tuple:
    """(kind, llguidance grammar) of exactly one request form; (None, None) when none is given."""
    ll = _llguidance()
    given = [k for k, v in (("grammar", grammar), ("lark", lark), ("regex", regex), ("json_schema", json_schema))
             if v is not None] + (["json_object"] if json_object else [])
    if not given:
        return None, None
    if len(given) > 1:
        raise ValidationError(f"pass one constraint, got {given}. Fix: keep one of grammar=, lark=, regex=, "
                              "json_schema=, json_object=")
    kind = given[0]
    value = {"grammar": grammar, "lark": lark, "regex": regex}.get(kind)
    if kind in ("grammar", "lark", "regex") and not isinstance(value, str):
        raise ValidationError(f"{kind}= takes a str, got {type(value).__name__}")
    if json_object is not True and kind == "json_object":
        raise ValidationError(f"json_object= takes True or False, got {json_object!r}")
    if kind == "grammar":  # GBNF (llama.cpp) or Lark: llguidance tells them apart
        try:
            return kind, ll.grammar_from("grammar", grammar)
        except ValueError as e:
            raise ValidationError(f"grammar: {e}. Fix: a GBNF grammar with a root rule (root ::= ...) or a Lark "
                                  "grammar with a start rule") from None
    if kind == "lark":
        return kind, ll.LLMatcher.grammar_from_lark(lark)
    if kind == "regex":
        return kind, ll.LLMatcher.grammar_from_regex(regex)
    schema = '{"type": "object"}' if kind == "json_object" else _schema_text(json_schema)
    try:
        return kind, ll.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    except ValueError as e:
        raise ValidationError(f"json_schema: {e}") from None


def check_request(**request) -> str | None:
    """Check a grammar request without a tokenizer (before a model loads): its kind, or None without one."""
    kind, text = grammar_text(**request)
    if kind is not None:
        err = _llguidance().LLMatcher.validate_grammar(text, limits=parser_limits())
        if err and not err.startswith("WARNING"):
            raise ValidationError(f"{kind}: {err.strip()}")
    return kind


class Matcher:
    """One sequence's position in a Constraint's grammar (llguidance LLMatcher)."""

    def __init__(self, constraint: "Constraint", matcher):
        self.constraint = constraint
        self._m = matcher
        self.words = constraint.words
        self._ready = None  # the next mask, when branches() computed it ahead

    def mask_into(self, buf: np.ndarray) -> None:
        """Write the allowed next tokens into buf (np.uint32[words], C-contiguous): bit i of word i // 32."""
        if buf.dtype != np.uint32 or buf.shape != (self.words,) or not buf.flags["C_CONTIGUOUS"]:
            raise ValidationError(f"mask_into: buf must be a C-contiguous np.uint32[{self.words}], got "
                                  f"{buf.dtype}{list(buf.shape)}")
        if self._ready is not None:  # computed ahead by branches()
            buf[:] = self._ready
            self._ready = None
            return
        self._m.unsafe_compute_mask_ptr(buf.ctypes.data, buf.nbytes)
        self._check()

    def branches(self, mask: np.ndarray, limit: int = 16) -> dict:
        """{token: the Matcher after it, with its next mask already computed} for every token `mask` allows,
        when it allows at most `limit` (else {}). The generation loop runs this while the device draws
        from `mask`, so the next mask is ready the moment the token arrives."""
        n = int(np.unpackbits(mask.view(np.uint8)).sum())
        if n < 2 or n > limit:
            return {}
        out = {}
        for t in np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:self.constraint.vocab_size]):
            c = self._m.deep_copy()
            if not c.consume_token(int(t)) or c.is_error():
                continue
            nxt = Matcher(self.constraint, c)
            if not c.is_stopped() and not c.compute_ff_tokens():
                ready = np.zeros(self.words, np.uint32)
                c.unsafe_compute_mask_ptr(ready.ctypes.data, ready.nbytes)
                nxt._ready = ready
            out[int(t)] = nxt
        return out

    def mask(self) -> np.ndarray:
        """The allowed next tokens as a new np.uint32[words]."""
        buf = np.zeros(self.words, np.uint32)
        self.mask_into(buf)
        return buf

    def consume(self, token: int) -> None:
        """Advance past `token` (ValidationError with llguidance's message if the grammar forbids it)."""
        self._ready = None
        if not self._m.consume_token(int(token)):
            raise ValidationError(f"grammar: token {int(token)} is not allowed here: {self._m.get_error()}")

    def forced_tokens(self) -> list:
        """The tokens the grammar forces next (llguidance's fast-forward; empty when there is a choice)."""
        return list(self._m.compute_ff_tokens())

    def completion(self, limit: int) -> list | None:
        """A short token path that completes the grammar from here (None if none is found within `limit`).

        Greedy on a copy of the matcher: forced tokens, else a closing token (quote, brace, bracket,
        a digit, ...) the mask allows, else the lowest allowed id; it stops where the text is complete.
        """
        m = self._m.deep_copy()
        path: list = []
        buf = np.zeros(self.words, np.uint32)
        prefer = self.constraint.closers
        while not m.is_accepting():
            if len(path) >= limit:
                return None
            ff = list(m.compute_ff_tokens())
            if ff:
                pick = ff[:limit - len(path)]
            else:
                m.unsafe_compute_mask_ptr(buf.ctypes.data, buf.nbytes)
                ok = [t for t in prefer if buf[t >> 5] >> (t & 31) & 1]
                if not ok:
                    bits = np.flatnonzero(np.unpackbits(buf.view(np.uint8), bitorder="little"))
                    ok = [int(b) for b in bits if b < self.constraint.vocab_size]
                if not ok:
                    return None
                pick = ok[:1]
            if not m.consume_tokens(pick) or m.is_error():
                return None
            path += pick
        return path

    def is_done(self) -> bool:
        """Whether the grammar is complete and allows nothing but EOS."""
        return self._m.is_stopped()

    def is_accepting(self) -> bool:
        """Whether the text so far is a complete match (EOS allowed)."""
        return self._m.is_accepting()

    def rollback(self, n: int) -> None:
        """Undo the last n consumed tokens."""
        self._ready = None
        if not self._m.rollback(int(n)):
            raise ValidationError(f"grammar: cannot roll back {n} tokens: {self._m.get_error()}")

    def _check(self) -> None:
        if self._m.is_error():
            raise ValidationError(f"grammar: {self._m.get_error()}")


@dataclass
class Constraint:
    """A compiled grammar for one tokenizer; matcher() gives each sequence its own Matcher."""

    kind: str  # grammar, lark, regex, json_schema or json_object
    grammar: str  # llguidance's grammar text
    tokenizer: object  # llguidance.LLTokenizer
    vocab_size: int
    closers: tuple = ()  # single-byte tokens a completion prefers (see Matcher.completion)

    @property
    def words(self) -> int:
        """u32 words of a mask."""
        return (self.vocab_size + 31) // 32

    @classmethod
    def from_request(cls, model=None, *, tokenizer=None, vocab_size: int | None = None, eos_token_ids=(),
                     grammar=None, lark=None, regex=None, json_schema=None,
                     json_object: bool = False) -> "Constraint | None":
        """The Constraint of one request's grammar=/lark=/regex=/json_schema=/json_object= (None if none is set).

        Give the model (its tokenizer, vocab size and EOS ids), or tokenizer= + vocab_size= (+ eos_token_ids=).
        An invalid grammar, regex or schema is a ValidationError with llguidance's message and position.
        """
        kind, text = grammar_text(grammar, lark, regex, json_schema, json_object)
        if kind is None:
            return None
        if model is not None:
            tokenizer, vocab_size = model.tokenizer, model.config.vocab_size
            eos_token_ids = model.config.eos_token_ids
        if tokenizer is None or vocab_size is None:
            raise ValidationError("Constraint.from_request: pass the model, or tokenizer= and vocab_size=")
        ll = _llguidance()
        lt = ll_tokenizer(tokenizer, int(vocab_size), eos_token_ids)
        err = ll.LLMatcher.validate_grammar(text, lt, limits=parser_limits())
        if err and not err.startswith("WARNING"):
            raise ValidationError(f"{kind}: {err.strip()}")
        closers = tuple(ids[0] for ids in (lt.tokenize_str(c) for c in CLOSERS) if len(ids) == 1)
        return cls(kind, text, lt, int(vocab_size), closers)

    def matcher(self) -> Matcher:
        """A fresh Matcher at the start of the grammar."""
        ll = _llguidance()
        m = Matcher(self, ll.LLMatcher(self.tokenizer, self.grammar, log_level=0, limits=parser_limits()))
        m._check()
        return m


def pop_request(options: dict) -> dict:
    """Remove the constraint keywords (grammar=, lark=, regex=, json_schema=, json_object=) from options."""
    return {k: options.pop(k) for k in REQUEST_KEYS if k in options}


__all__ = ["Constraint", "Matcher", "grammar_text", "check_request", "ll_tokenizer", "pop_request", "REQUEST_KEYS"]
