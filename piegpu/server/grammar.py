"""Structured output for the server: response_format (and llama.cpp's grammar / json_schema / regex extensions)
as piegpu.inferlets.grammar Constraints, one llguidance Matcher per choice (a batch row's grammar mask)."""

from __future__ import annotations

from ..errors import PieGpuError
from ..inferlets.grammar import Constraint
from .protocol import ServerError, parse_schema


class Constraints:
    """Builds the per-choice matchers of requests that constrain their output."""

    def __init__(self, model):
        self.model = model

    @staticmethod
    def request(req) -> dict:
        """The constraint keywords of a request ({} when it has none)."""
        out = {}
        rf = getattr(req, "response_format", None)
        if rf is not None and rf.type == "json_object":
            out["json_object"] = True
        elif rf is not None and rf.type == "json_schema":
            out["json_schema"] = parse_schema(rf)
        for key in ("grammar", "regex", "json_schema"):  # llama.cpp server / vLLM style extensions
            value = getattr(req, key, None)
            if value is not None:
                if out:
                    raise ServerError(400, f"{key} and another output constraint (response_format, grammar, "
                                           "regex, json_schema) were both given; pass one", key)
                out[key] = value
        return out

    def wants(self, req) -> bool:
        """Whether the request constrains its output."""
        return bool(self.request(req))

    def factory(self, req):
        """() -> a fresh Matcher per choice; 400 with llguidance's message for a grammar it cannot compile."""
        try:
            c = Constraint.from_request(self.model, **self.request(req))
        except PieGpuError as e:
            raise ServerError(400, f"the output constraint cannot be used: {e}", "response_format") from None
        c.matcher()  # a grammar that fails at its start fails here, not on the engine thread
        return c.matcher
