"""Structured output for the server: response_format (and llama.cpp's grammar / json_schema / regex extensions)
and tool calls (the Lark grammar server/tools.py builds) as piegpu.inferlets.grammar Constraints, one llguidance
Matcher per choice (a batch row's grammar mask)."""

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
        tools = getattr(req, "_tool_grammar", None)  # server/tools.py folded response_format into it
        if tools is not None:
            extra = next((k for k in ("grammar", "regex", "json_schema") if getattr(req, k, None) is not None), None)
            if extra:
                raise ServerError(400, f"{extra} cannot be combined with tools (the answer follows the tool-call "
                                       "grammar); drop it, or pass tool_choice none", extra)
            return {"lark": tools}
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

    def factory(self, req) -> tuple:
        """(() -> a fresh Matcher per choice, None) for llguidance's host masks, or (None, TokenAutomaton) where the
        grammar runs on the device (grammar_mode, textgen/grammar_run.py); 400 with the reason for a grammar that
        cannot be used, or grammar_mode 'device' on one the device cannot run."""
        from ..textgen.grammar_run import plan
        request = self.request(req)
        where = "tools" if getattr(req, "_tool_grammar", None) is not None else "response_format"
        try:
            c = Constraint.from_request(self.model, **request)
            chosen = plan(self.model, request, getattr(req, "grammar_mode", "auto"), c)
        except (PieGpuError, ValueError) as e:
            raise ServerError(400, f"the output constraint cannot be used: {e}", where) from None
        if chosen.mode == "device":
            return None, chosen.automaton
        c.matcher()  # a grammar that fails at its start fails here, not on the engine thread
        return c.matcher, None
