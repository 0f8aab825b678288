"""Tool calls out of a chat answer: CallParser splits the generated text into content and calls, and ToolChat
shapes them as OpenAI's message.tool_calls / streamed tool_calls deltas (server/tools.py sets both up).

CallParser reads the text one character at a time and decides everything from the characters alone, so
its output does not depend on how the text arrives: the streamed fragments joined equal what the whole
text gives, and a streamed answer reassembles to the non-streamed one for the same seed.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from typing import Callable

# {"name": "<name>", "arguments": (Qwen/Hermes, Mistral, the generic format) or "parameters": (Llama 3.x)
_HEAD = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:', re.S)
_ALNUM = string.ascii_letters + string.digits


def call_id(style: str = "openai") -> str:
    """A fresh tool call id: OpenAI's "call_<random>", or the 9 letters and digits Mistral's template insists on."""
    if style == "mistral":
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "call_" + secrets.token_hex(12)


class CallParser:
    """Content and tool calls of one answer, as events: ("content", text), ("call", k, id, name), ("args", k, text),
    ("end", k) once call k's arguments value is whole (a call never ended was cut short: by max_tokens).

    `trigger` opens the calls anywhere in the text and is not content ("<tool_call>", "[TOOL_CALLS]");
    `start` opens them when it is the answer's first character and belongs to the calls ("{" for Llama's
    bare JSON, "[" for Mistral's list when [TOOL_CALLS] is a special token the text leaves out). In the
    calls, every top-level JSON object is one call {"name": ..., "arguments"|"parameters": ...}; what lies
    between them (tags, brackets, separators) is dropped. Whitespace right before the trigger is dropped too.
    """

    def __init__(self, trigger: str | None, start: str | None, id_style: str = "openai"):
        self.trigger, self.start, self.id_style = trigger, start, id_style
        self.pos = 0
        self.in_calls = False
        self.held = ""  # content that may still turn out to be the trigger (or whitespace before it)
        self.calls: list = []  # [id, name, arguments so far, ended] per call
        self._obj = None  # the object being read: its text, depth, string state, phase
        self._out: list = []

    # ---- input ----------------------------------------------------------------------------------
    def feed(self, text: str) -> list:
        """The events `text` completes."""
        for ch in text:
            if not self.in_calls:
                if self.pos == 0 and self.start is not None and ch == self.start:
                    self.in_calls = True
                    self._call_char(ch)
                else:
                    self._content_char(ch)
            else:
                self._call_char(ch)
            self.pos += 1
        return self._take()

    def close(self) -> list:
        """The events the end of the answer releases (held-back content; a call cut short stays as it is)."""
        if not self.in_calls and self.held:
            self._emit_content(self.held)
            self.held = ""
        obj = self._obj
        if obj is not None and obj["phase"] == "head":  # an object that never named its function: one last try
            self._fallback(obj["text"])
        self._obj = None
        return self._take()

    # ---- content --------------------------------------------------------------------------------
    def _content_char(self, ch: str) -> None:
        held = self.held + ch
        trig = self.trigger
        if trig and held.endswith(trig):
            self.held = ""
            self.in_calls = True
            return
        keep = 0
        for k in range(min(len(held), len(trig) - 1 if trig else 0), -1, -1):
            if held.endswith(trig[:k] if trig else ""):
                keep = k
                break
        j = len(held) - keep
        while j > 0 and held[j - 1].isspace():
            j -= 1
        if j:
            self._emit_content(held[:j])
        self.held = held[j:]

    def _emit_content(self, text: str) -> None:
        if self._out and self._out[-1][0] == "content":
            self._out[-1] = ("content", self._out[-1][1] + text)
        else:
            self._out.append(("content", text))

    # ---- calls ----------------------------------------------------------------------------------
    def _call_char(self, ch: str) -> None:
        obj = self._obj
        if obj is None:
            if ch == "{":
                self._obj = {"text": "{", "depth": 1, "in_str": False, "esc": False, "phase": "head",
                             "started": False, "ws": ""}
            return
        outer = obj["depth"] == 1 and not obj["in_str"]  # at the call object's own level, before this char
        self._lex(obj, ch)
        if obj["phase"] == "head":
            obj["text"] += ch
            if ch == ":" and not obj["in_str"]:
                m = _HEAD.fullmatch(obj["text"])
                if m:
                    try:
                        name = json.loads(f'"{m.group(1)}"')
                    except json.JSONDecodeError:
                        name = m.group(1)
                    self._begin(name)
                    obj["phase"] = "args"
            if obj["depth"] == 0:
                self._fallback(obj["text"])
                self._obj = None
        elif obj["phase"] == "args":
            if outer and ch in ",}":  # the arguments value ended; the rest of the object is not streamed
                obj["phase"] = "tail"
                self._end()
            elif not obj["started"] and ch.isspace():
                pass
            elif ch.isspace() and (outer or not obj["in_str"]):
                obj["started"] = True
                obj["ws"] += ch  # sent only if more of the value follows
            else:
                obj["started"] = True
                self._emit_args(obj["ws"] + ch)
                obj["ws"] = ""
            if obj["depth"] == 0:
                self._obj = None
        elif obj["depth"] == 0:  # tail
            self._obj = None

    @staticmethod
    def _lex(obj: dict, ch: str) -> None:
        if obj["in_str"]:
            if obj["esc"]:
                obj["esc"] = False
            elif ch == "\\":
                obj["esc"] = True
            elif ch == '"':
                obj["in_str"] = False
        elif ch == '"':
            obj["in_str"] = True
        elif ch in "{[":
            obj["depth"] += 1
        elif ch in "}]":
            obj["depth"] -= 1

    def _begin(self, name: str) -> None:
        self.calls.append([call_id(self.id_style), name, "", False])
        k = len(self.calls) - 1
        self._out.append(("call", k, self.calls[k][0], name))

    def _emit_args(self, text: str) -> None:
        k = len(self.calls) - 1
        self.calls[k][2] += text
        if self._out and self._out[-1][0] == "args" and self._out[-1][1] == k:
            self._out[-1] = ("args", k, self._out[-1][2] + text)
        else:
            self._out.append(("args", k, text))

    def _fallback(self, text: str) -> None:
        """A whole object whose keys came in another order: parsed at once, its arguments re-serialized."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters", {}))
            self._begin(obj["name"])
            self._emit_args(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
            self._end()

    def _end(self) -> None:
        k = len(self.calls) - 1
        self.calls[k][3] = True
        self._out.append(("end", k))

    def complete_calls(self) -> list:
        """(id, name, arguments) of the calls whose arguments ended (a call cut by max_tokens is left out)."""
        return [(i, n, a) for i, n, a, ended in self.calls if ended]

    def _take(self) -> list:
        out, self._out = self._out, []
        return out


def parse_answer(parser: CallParser, text: str) -> tuple:
    """(content or None, [(id, name, arguments)]) of a whole answer (content is None when calls came and no text)."""
    events = parser.feed(text) + parser.close()
    content = "".join(e[1] for e in events if e[0] == "content")
    calls = parser.complete_calls()
    if parser.calls and not content.strip():  # (calls cut short count: the answer was no text)
        return None, calls
    return content, calls


class ToolChat:
    """The chat.completion shapes of a request whose answer may call tools (wraps app.py's plain chat shape)."""

    def __init__(self, base, new_parser: Callable[[], CallParser], legacy: bool = False):
        self.base, self.new_parser, self.legacy = base, new_parser, legacy
        self.object, self.chunk_object, self.id_prefix = base.object, base.chunk_object, base.id_prefix
        self.role_chunk = True
        self.parsers: dict = {}
        self.pending: dict = {}  # choice -> logprob entries not yet attached to a delta
        # choice -> events of the call being read, sent once its arguments are whole: a streamed call always parses,
        # and one cut by max_tokens is never sent (as the whole answer leaves it out)
        self.held: dict = {}

    def logprobs(self, entries: list | None) -> dict | None:
        """As the plain chat shape."""
        return self.base.logprobs(entries)

    def _reason(self, reason: str, calls: bool) -> str:
        if calls and reason == "stop":
            return "function_call" if self.legacy else "tool_calls"
        return reason

    def choice(self, index: int, text: str, entries: list | None, reason: str) -> dict:
        """A whole choice: message.content and message.tool_calls (legacy: message.function_call)."""
        content, calls = parse_answer(self.new_parser(), text)  # calls cut by max_tokens left out
        message = {"role": "assistant", "content": content, "refusal": None}
        if calls and self.legacy:
            message["function_call"] = {"name": calls[0][1], "arguments": calls[0][2]}
        elif calls:
            message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                     for i, n, a in calls]
        return {"index": index, "message": message, "logprobs": self.logprobs(entries),
                "finish_reason": self._reason(reason, bool(calls))}

    def delta(self, index: int, text: str | None, entries: list | None, reason: str | None,
              first: bool = False) -> dict:
        """The opening role chunk (the plain shape's)."""
        return self.base.delta(index, text, entries, reason, first)

    def _event_delta(self, ev: tuple) -> dict:
        if ev[0] == "content":
            return {"content": ev[1]}
        if ev[0] == "call":
            if self.legacy:
                return {"function_call": {"name": ev[3], "arguments": ""}}
            return {"tool_calls": [{"index": ev[1], "id": ev[2], "type": "function",
                                    "function": {"name": ev[3], "arguments": ""}}]}
        if self.legacy:
            return {"function_call": {"arguments": ev[2]}}
        return {"tool_calls": [{"index": ev[1], "function": {"arguments": ev[2]}}]}

    def _choices(self, index: int, events: list, entries, reason=None) -> list:
        if entries:
            self.pending.setdefault(index, []).extend(entries)
        out = [{"index": index, "delta": self._event_delta(ev), "logprobs": None, "finish_reason": None}
               for ev in events]
        if reason is not None:
            out.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": reason})
        if out and self.pending.get(index):
            out[0]["logprobs"] = self.logprobs(self.pending.pop(index))
        return out

    def _release(self, index: int, events: list) -> list:
        """The events to send now: a call's are held until its ("end", k)."""
        held = self.held.setdefault(index, [])
        out = []
        for ev in events:
            if ev[0] == "end":
                out += held
                held.clear()
            elif ev[0] in ("call", "args") or held:
                held.append(ev)
            else:
                out.append(ev)
        return out

    def deltas(self, index: int, text: str, entries: list | None) -> list:
        """The stream's choice deltas for one generated piece (none while it may still be a tool call's start, or
        is a call whose arguments are not whole yet)."""
        parser = self.parsers.setdefault(index, self.new_parser())
        return self._choices(index, self._release(index, parser.feed(text)), entries)

    def finish(self, index: int, reason: str) -> list:
        """The deltas the end releases (a call cut short is dropped), then the one carrying finish_reason
        (tool_calls when calls came)."""
        parser = self.parsers.setdefault(index, self.new_parser())
        events = self._release(index, parser.close())
        self.held.pop(index, None)
        return self._choices(index, events, None, self._reason(reason, bool(parser.complete_calls())))
