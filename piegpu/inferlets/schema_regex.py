"""JSON schemas as regexes for the device automata: outlines-core's construction, checked so it never widens.

outlines-core turns a schema into a regex but ignores some keywords (integer bounds, uniqueItems, minProperties,
...): a regex that ignores a bound accepts values the schema rejects. So before it runs, every subschema is checked
against the keywords the construction honours exactly (or narrows, like additionalProperties: outlines emits no extra
keys, which still validates); any other keyword makes the request Unfit, and it runs on llguidance's host path.
Integer and number bounds are the common case in tool schemas, so they are built here: the subschema is replaced by a unique
string constant, and its quoted form in outlines' regex by an exact integer-range regex (int_range_regex).
ECMA-262 classes in patterns and formats (\\d, \\w: ASCII there) are made ASCII, as JSON Schema reads them.
"""

from __future__ import annotations

import json
import math

from .automaton import Unfit, outlines_core

DEVICE_KINDS = ("regex", "json_schema", "json_object")  # GBNF and Lark (recursive in general) stay on the host
RECURSION_DEPTH = 3  # how deep outlines would unroll a recursive schema; such schemas run on the host
ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "readOnly", "writeOnly",
               "deprecated", "$anchor"}
HONOURED = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
            "const", "anyOf", "oneOf", "$ref", "$defs", "definitions", "minLength", "maxLength", "pattern", "format"}
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
FORMATS = {"date", "date-time", "time", "email", "uri", "uuid"}
_MARK = "zqxPIEGPU{}qxz"


def _digits_range(x: str, y: str) -> str:
    """Regex of the decimal strings from x to y (same length, x <= y)."""
    n = len(x)
    if n == 1:
        return x if x == y else f"[{x}-{y}]"
    if x[0] == y[0]:
        return x[0] + _group(_digits_range(x[1:], y[1:]))
    parts, lo, hi = [], int(x[0]), int(y[0])
    if x[1:] != "0" * (n - 1):
        parts.append(x[0] + _group(_digits_range(x[1:], "9" * (n - 1))))
        lo += 1
    tail = None
    if y[1:] != "9" * (n - 1):
        tail = y[0] + _group(_digits_range("0" * (n - 1), y[1:]))
        hi -= 1
    if lo <= hi:
        parts.append((str(lo) if lo == hi else f"[{lo}-{hi}]") + f"[0-9]{{{n - 1}}}")
    if tail:
        parts.append(tail)
    return "|".join(parts)


def _group(r: str) -> str:
    return f"(?:{r})" if "|" in r else r


def _magnitudes(a: int, b: int | None) -> list:
    """Regexes (alternatives) of the decimals a..b (b None: unbounded), 0 <= a, canonical (no leading zeros)."""
    out = []
    d = len(str(a))
    while b is None or d <= len(str(b)):
        lo = max(a, 10 ** (d - 1) if d > 1 else 0)
        hi = 10 ** d - 1 if b is None or len(str(b)) > d else b
        if b is None and d > len(str(a)):
            out.append(f"[1-9][0-9]{{{d - 1},}}")
            break
        if lo <= hi:
            out.append(_digits_range(str(lo), str(hi)))
        d += 1
    return out


def int_range_regex(lo: int | None, hi: int | None) -> str:
    """A regex of exactly the JSON integers n with lo <= n <= hi (None: unbounded), canonical form."""
    if lo is not None and hi is not None and lo > hi:
        raise Unfit(f"no integer lies in [{lo}, {hi}] (the schema is unsatisfiable)")
    alts = []
    if lo is None or lo < 0:  # negatives: "-" then magnitudes max(1, -hi) .. -lo
        top = None if lo is None else -lo
        bottom = 1 if hi is None or hi >= 0 else -hi
        alts += ["-" + _group(r) for r in _magnitudes(bottom, top)]
    if hi is None or hi >= 0:
        alts += _magnitudes(max(lo or 0, 0), hi)
    return "(?:" + "|".join(alts) + ")"


def number_range_regex(lo: int | None, hi: int | None) -> str:
    """A regex of JSON numbers in [lo, hi] (integer bounds, None: unbounded): the integers there, and decimals whose
    whole unit interval lies inside ([n, n+1) for n >= 0, (-k-1, -k] for -k < 0). It narrows -- no exponents, no
    "-0.x", no fraction on the last unit -- so every value it allows validates."""
    alts = [int_range_regex(lo, hi)]
    a, b = max(lo, 0) if lo is not None else 0, hi - 1 if hi is not None else None
    if b is None or a <= b:
        alts.append("(?:" + "|".join(_magnitudes(a, b)) + r")\.[0-9]+")
    bottom, top = max(1, -hi) if hi is not None else 1, -lo - 1 if lo is not None else None
    if top is None or bottom <= top:
        alts.append("-(?:" + "|".join(_magnitudes(bottom, top)) + r")\.[0-9]+")
    return "(?:" + "|".join(alts) + ")"


def _bounds(node: dict, where: str) -> tuple:
    lo = hi = None
    for k in BOUNDS:
        v = node.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Unfit(f"{where}: {k}={v!r} (draft-4 boolean form) is not built for the device")
        if k == "minimum":
            lo = max(lo, math.ceil(v)) if lo is not None else math.ceil(v)
        elif k == "exclusiveMinimum":
            lo = max(lo, math.floor(v) + 1) if lo is not None else math.floor(v) + 1
        elif k == "maximum":
            hi = min(hi, math.floor(v)) if hi is not None else math.floor(v)
        else:
            hi = min(hi, math.ceil(v) - 1) if hi is not None else math.ceil(v) - 1
    return lo, hi


def _rewrite(node, where: str, ranges: dict):
    """A copy of schema `node` with integer bounds replaced by marks (ranges: mark -> regex); Unfit on keywords the
    regex construction would ignore."""
    if isinstance(node, list):
        return [_rewrite(n, f"{where}[{i}]", ranges) for i, n in enumerate(node)]
    if not isinstance(node, dict):
        return node
    extra = set(node) - HONOURED - ANNOTATIONS - set(BOUNDS)
    if extra:
        raise Unfit(f"{where}: {sorted(extra)} would be ignored by the device automaton's regex")
    if node.get("format") is not None and node["format"] not in FORMATS:
        raise Unfit(f"{where}: format {node['format']!r} has no regex (device formats: {sorted(FORMATS)})")
    if any(k in node for k in BOUNDS):
        if node.get("type") not in ("integer", "number"):
            raise Unfit(f"{where}: bounds on a {node.get('type', 'untyped')!r} value are only built for integers "
                        "and numbers")
        lo, hi = _bounds(node, where)
        if lo is not None and hi is not None and lo > hi:
            raise Unfit(f"{where}: no {node['type']} lies in [{lo}, {hi}] (the schema is unsatisfiable)")
        mark = _MARK.format(len(ranges))
        ranges[mark] = int_range_regex(lo, hi) if node["type"] == "integer" else number_range_regex(lo, hi)
        return {"const": mark}
    out = {}
    for k, v in node.items():
        if k in ("properties", "$defs", "definitions") and isinstance(v, dict):
            out[k] = {name: _rewrite(sub, f"{where}.{k}.{name}", ranges) for name, sub in v.items()}
        elif k in ("items", "additionalProperties", "anyOf", "oneOf"):
            out[k] = _rewrite(v, f"{where}.{k}", ranges)
        else:
            out[k] = v
    return out


def ascii_classes(regex: str) -> str:
    """`regex` with \\d, \\D, \\w, \\W as ECMA-262 reads them (ASCII), inside and outside brackets."""
    inside = {"d": "0-9", "w": "A-Za-z0-9_"}
    outside = {"d": "[0-9]", "D": "[^0-9]", "w": "[A-Za-z0-9_]", "W": "[^A-Za-z0-9_]"}
    out, i, depth = [], 0, 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex):
            nxt = regex[i + 1]
            if depth and nxt in inside:
                out.append(inside[nxt])
            elif not depth and nxt in outside:
                out.append(outside[nxt])
            elif depth and nxt in "DW":
                raise Unfit(f"\\{nxt} inside a character class is not built for the device")
            else:
                out.append(regex[i:i + 2])
            i += 2
            continue
        if c == "[" and not depth:
            depth = 1
        elif c == "]" and depth:
            depth = 0
        out.append(c)
        i += 1
    return "".join(out)


def request_regex(kind: str, value) -> str:
    """The regex of a device-capable request (regex=, json_schema=, json_object=True); Unfit for other kinds."""
    if kind not in DEVICE_KINDS:
        raise Unfit(f"{kind}= grammars run on the host (llguidance); device automata take regex=, json_schema= "
                    "or a JSON schema's tool call")
    if kind == "regex":
        return value
    if kind == "json_object":
        raise Unfit("json_object=True allows any nesting depth (not a regular language); give a json_schema")
    return schema_regex(value)


def schema_regex(schema) -> str:
    """The regex of a JSON schema for the device automaton (compact JSON, objects closed as llama.cpp reads them);
    Unfit where the schema is recursive or uses a keyword the construction would not honour."""
    from .grammar import closed_objects
    build_regex_from_schema = outlines_core().json_schema.build_regex_from_schema
    if isinstance(schema, str):
        schema = json.loads(schema)
    if schema is True or schema == {}:
        raise Unfit("the schema allows any JSON value (any nesting depth: not a regular language)")
    ranges: dict = {}
    text = json.dumps(_rewrite(closed_objects(schema), "schema", ranges))
    try:
        regex = build_regex_from_schema(text, "", RECURSION_DEPTH)
        deeper = build_regex_from_schema(text, "", RECURSION_DEPTH + 1)
    except (ValueError, TypeError, RuntimeError) as e:
        raise Unfit(f"outlines-core cannot turn this schema into a regex: {e}") from None
    if regex != deeper:
        raise Unfit("the schema is recursive ($ref cycles or free nesting): its language is not regular")
    regex = ascii_classes(regex)
    for mark, r in ranges.items():
        quoted = f'"{mark}"'
        if quoted not in regex:
            raise Unfit("outlines-core wrote an integer bound's placeholder in an unexpected form")
        regex = regex.replace(quoted, r)
    return regex


__all__ = ["request_regex", "DEVICE_KINDS", "schema_regex", "int_range_regex", "number_range_regex", "ascii_classes",
           "RECURSION_DEPTH"]
