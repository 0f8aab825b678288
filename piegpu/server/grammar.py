"""response_format for the server: JSON object / JSON Schema constraints as llguidance matchers, one per choice."""

from __future__ import annotations

import json
import threading

import numpy as np

from .protocol import ServerError, parse_schema


class Matcher:
    """One choice's grammar state: the allowed next tokens as packed u32 words, advanced by each drawn token."""

    def __init__(self, matcher):
        self.m = matcher

    def fill_mask(self, words: np.ndarray) -> None:
        """Write the allowed tokens (bit i of word i >> 5 = token i) into the u32 row `words`."""
        row = words.view(np.int32)
        if not row.flags["C_CONTIGUOUS"]:
            raise ValueError("fill_mask needs a contiguous row")
        self.m.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)

    def consume(self, token: int) -> None:
        """Advance past a drawn token."""
        self.m.consume_token(int(token))


class Constraints:
    """Builds per-choice matchers for requests whose response_format asks for JSON."""

    def __init__(self, model):
        self.model = model
        self._tokenizer = None
        self._lock = threading.Lock()

    def tokenizer(self):
        """The llguidance tokenizer of the model (built once, ~0.2 s)."""
        import llguidance
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = llguidance.LLTokenizer(self.model.tokenizer.to_str(),
                                                         n_vocab=self.model.config.vocab_size,
                                                         eos_token=list(self.model.config.eos_token_ids))
            return self._tokenizer

    @staticmethod
    def wants(req) -> bool:
        """Whether the request constrains its output."""
        rf = getattr(req, "response_format", None)
        return rf is not None and rf.type != "text"

    def factory(self, req):
        """() -> a fresh Matcher for each choice (400 for a schema llguidance cannot compile)."""
        import llguidance
        rf = req.response_format
        schema = parse_schema(rf) if rf.type == "json_schema" else {"type": "object"}
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        except (ValueError, TypeError) as e:
            raise ServerError(400, f"response_format: the JSON schema cannot be used: {e}",
                              "response_format") from None
        tok = self.tokenizer()
        problem = llguidance.LLMatcher.validate_grammar(grammar, tok)  # "" when valid
        if problem and not problem.startswith("WARNING"):
            raise ServerError(400, f"response_format: the JSON schema cannot be used: {problem}", "response_format")

        proto = llguidance.LLMatcher(tok, grammar, log_level=0)
        if proto.is_error():
            raise ServerError(400, f"response_format: the JSON schema cannot be used: {proto.get_error()}",
                              "response_format")
        return lambda: Matcher(proto.deep_copy())  # called on the engine thread: nothing there can fail
