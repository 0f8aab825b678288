"""Tokens to streamed text: incremental detokenization with stop strings held back until they cannot match.

Decoding is incremental (each token decodes a window of a few tokens, not the whole answer
again): the window starts at the last point where the decoded text ended on a whole
character, so a SentencePiece decoder's leading-space rule and a byte-level character split
over several tokens both decode exactly as the whole list would.
"""

from __future__ import annotations


class TextStream:
    """The text of one sequence as tokens arrive.

    push(token) returns the new text that is safe to send: a piece never ends inside a
    multi-byte character, and text that could be the start of a stop string is held back
    until it either completes the stop (then it is cut, with everything after it) or stops
    matching. Nothing of a stop string is ever returned (OpenAI leaves the stop sequence out
    of the output; so does this). finish() returns what is still held back at the end.
    """

    def __init__(self, tokenizer, stops=()):
        self.tokenizer = tokenizer
        self.stops = [s for s in stops if s]
        self.tokens: list = []
        self.decoded = ""  # the text of tokens[:_read], whole characters only
        self.sent = ""  # the text returned so far (a prefix of decoded)
        self.stopped = False  # a stop string matched
        self._prefix = 0  # tokens[_prefix:_read] decode to the tail of `decoded` (the window's context)
        self._read = 0

    def push(self, token: int) -> str:
        """The token's new safe text ("" while held back, and always "" once a stop string matched)."""
        if self.stopped:
            return ""
        self.tokens.append(token)
        grown = self._grow(final=False)
        if not grown:
            return ""
        start = len(self.sent)  # a stop cannot begin in text already sent: its first characters were held back
        cut = min((i for i in (self.decoded.find(s, start) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            return self._advance(cut)
        text = self.decoded
        hold = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        return self._advance(len(text) - hold)

    def finish(self) -> str:
        """The text held back at the end (no stop string can complete any more).

        A character cut by the end of generation (its last bytes never drawn) is left out.
        """
        if self.stopped:
            return ""
        self._grow(final=True)
        return self._advance(len(self.decoded))

    @property
    def text(self) -> str:
        """The text returned so far."""
        return self.sent

    def _grow(self, final: bool) -> bool:
        """Decode the window; append its new whole characters to `decoded`. True if it grew."""
        window = self.tokens[self._prefix:]
        before = self.tokenizer.decode(self.tokens[self._prefix:self._read]) if self._read > self._prefix else ""
        after = self.tokenizer.decode(window)
        if final:
            after = after.rstrip("\ufffd")
        elif after.endswith("\ufffd"):  # the last token ends inside a multi-byte character
            return False
        if len(after) <= len(before):
            return False
        self.decoded += after[len(before):]
        self._prefix, self._read = self._read, len(self.tokens)
        return True

    def _advance(self, end: int) -> str:
        piece = self.decoded[len(self.sent):end]
        if piece:
            self.sent = self.decoded[:end]
        return piece


__all__ = ["TextStream"]
