"""The small JSON-schema subset JSON mode enforces, compiled into nodes the grammar walks.

Supported: {"type": T} with T in string, number, integer, boolean, null, object, array;
objects with "properties" (each a schema) and "required" (names); arrays with "items".
A schema without "type" (e.g. {}) accepts any JSON value. Annotation keywords (title,
description, $schema, $id, examples, default) are ignored; anything else is refused,
so a schema is never silently weakened. Generated objects use only declared
properties (each at most once), which satisfies the schema whatever its
additionalProperties says.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ValidationError

TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
ANNOTATIONS = {"title", "description", "$schema", "$id", "examples", "default", "$comment"}
KEYWORDS = {"type", "properties", "required", "items", "additionalProperties"}


@dataclass(frozen=True)
class SchemaNode:
    """One compiled schema: kind ('any' or a TYPES entry), object properties/required, array items."""

    kind: str
    props: tuple = ()  # ((key bytes, node index), ...) in declaration order; empty: a free object
    required: frozenset = frozenset()
    items: int = 0  # node index of the array items (0 = the 'any' node)
    constrained: bool = False  # an object whose keys are limited to props


class Schema:
    """A compiled schema: nodes[0] is 'any', `root` the index of the top-level node."""

    def __init__(self, schema):
        self.nodes: list = [SchemaNode("any")]
        self.source = schema
        self.root = self._compile(schema, "$")
        self.depth = self._depth(self.root)

    def node(self, i: int) -> SchemaNode:
        """The node at index i."""
        return self.nodes[i]

    def _add(self, n: SchemaNode) -> int:
        self.nodes.append(n)
        return len(self.nodes) - 1

    def _compile(self, s, where: str) -> int:
        if s is True or s == {}:
            return 0
        if not isinstance(s, dict):
            raise ValidationError(f"JSON schema at {where}: expected an object (dict), got {s!r}")
        unknown = set(s) - KEYWORDS - ANNOTATIONS
        if unknown:
            raise ValidationError(f"JSON schema at {where}: unsupported keywords {sorted(unknown)}. Fix: JSON mode "
                                  f"supports {sorted(KEYWORDS)} (and ignores {sorted(ANNOTATIONS)})")
        t = s.get("type")
        if t is None:
            if set(s) & {"properties", "required", "items"}:
                raise ValidationError(f"JSON schema at {where}: 'properties'/'required'/'items' need a 'type'. "
                                      "Fix: add \"type\": \"object\" or \"array\"")
            return 0
        if t not in TYPES:
            raise ValidationError(f"JSON schema at {where}: type {t!r} is not supported. Fix: one of {list(TYPES)} "
                                  "(a single type, not a list)")
        if t == "array":
            items = self._compile(s.get("items", {}), where + ".items")
            return self._add(SchemaNode("array", items=items))
        if t != "object":
            extra = set(s) & {"properties", "required", "items"}
            if extra:
                raise ValidationError(f"JSON schema at {where}: {sorted(extra)} do not apply to type {t!r}")
            return self._add(SchemaNode(t))
        props = s.get("properties")
        required = s.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValidationError(f"JSON schema at {where}: 'required' must be a list of property names")
        if props is not None and not isinstance(props, dict):
            raise ValidationError(f"JSON schema at {where}: 'properties' must be an object")
        if props is None and not required:
            return self._add(SchemaNode("object"))
        props = dict(props or {})
        for r in required:
            props.setdefault(r, {})
        compiled = []
        for key, sub in props.items():
            if any(c in key for c in '"\\') or any(ord(c) < 0x20 for c in key):
                raise ValidationError(f"JSON schema at {where}: property name {key!r} needs escaping in JSON. "
                                      "Fix: use names without quotes, backslashes or control characters")
            compiled.append((key.encode("utf-8"), self._compile(sub, f"{where}.{key}")))
        return self._add(SchemaNode("object", tuple(compiled), frozenset(r.encode("utf-8") for r in required),
                                    constrained=True))

    def _depth(self, i: int) -> int:
        n = self.nodes[i]
        if n.kind == "array":
            return 1 + self._depth(n.items)
        if n.kind == "object":
            return 1 + max((self._depth(j) for _, j in n.props), default=0)
        return 0


def validate(value, schema) -> list:
    """The ways `value` (parsed JSON) violates `schema` (the subset above); [] when it satisfies it."""
    errors: list = []
    _check(value, schema, "$", errors)
    return errors


def _type_ok(value, t: str) -> bool:
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "null":
        return value is None
    if t == "object":
        return isinstance(value, dict)
    return isinstance(value, list)


def _check(value, s, where: str, errors: list) -> None:
    if s is True or not isinstance(s, dict) or "type" not in s:
        return
    t = s["type"]
    if not _type_ok(value, t):
        errors.append(f"{where}: expected {t}, got {type(value).__name__}")
        return
    if t == "object":
        for r in s.get("required", []):
            if r not in value:
                errors.append(f"{where}: missing required property {r!r}")
        props = s.get("properties", {})
        for k, v in value.items():
            if k in props:
                _check(v, props[k], f"{where}.{k}", errors)
            elif s.get("additionalProperties") is False:
                errors.append(f"{where}: property {k!r} is not allowed")
    elif t == "array":
        for i, v in enumerate(value):
            _check(v, s.get("items", {}), f"{where}[{i}]", errors)


__all__ = ["Schema", "SchemaNode", "validate", "TYPES"]
