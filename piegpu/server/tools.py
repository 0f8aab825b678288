"""OpenAI tool calling on /v1/chat/completions: the prompt, the grammar the answer follows, the answer's shape.

The tool-call format is the model family's, detected from the chat template's text:

    hermes   Qwen 2.5 / 3 (and Hermes-style templates): <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>,
             several blocks, one per line, for parallel calls
    llama3   Llama 3.x JSON tool calling: {"name": ..., "parameters": {...}} (one call per answer)
    mistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
    generic  templates that do not render tools (SmolLM2's): piegpu adds a system-prompt block listing the
             tools' JSON schemas (GENERIC_PROMPT) and the answer is hermes-shaped; tool results go back as user
             turns in <tool_response></tool_response> tags

The first three render the tools through the template's own `tools` variable (as transformers'
apply_chat_template does). Generation is constrained with llguidance to the format: a Lark grammar with
each function's arguments as a %json block of its parameters schema. tool_choice "required" / a named
function: the answer is tool calls (of that function); "auto": text that does not start a tool call, or
(hermes: after optional text) tool calls; "none": no constraint (the tools are still in the prompt).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from ..errors import PieGpuError
from ..inferlets.grammar import Constraint, closed_objects
from .protocol import ServerError
from .toolcalls import CallParser, ToolChat

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}  # json.dumps' layout
GENERIC_PROMPT = (
    "# Tools\n\nYou can call functions to help with the user's request. Their signatures (JSON Schema) are "
    "listed in <tools></tools> tags:\n<tools>\n{tools}\n</tools>\n\nTo call a function, answer with a JSON object "
    "holding its name and arguments inside <tool_call></tool_call> tags, one block per call:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <arguments-object>}}\n</tool_call>\n'
    "Function results come back inside <tool_response></tool_response> tags.")
NO_TRIGGER = "/(?s:.*)/ & ~/(?s:.*){t}(?s:.*)/"  # text in which the trigger never appears


@dataclass(frozen=True)
class ToolFormat:
    """How one model family writes tool calls."""

    family: str  # hermes, llama3, mistral or generic
    key: str = "arguments"  # the arguments' key in a call object ("parameters" for Llama 3)
    trigger: str | None = "<tool_call>"  # opens the calls anywhere in the answer
    start: str | None = None  # opens the calls as the answer's first character
    in_template: bool = True  # the chat template renders the tools itself
    parallel: bool = True  # several calls per answer
    id_style: str = "openai"

    def parser(self) -> CallParser:
        """A fresh parser of answers in this format."""
        return CallParser(self.trigger, self.start, self.id_style)


FORMATS = {
    "hermes": ToolFormat("hermes"),
    "generic": ToolFormat("generic", in_template=False),
    "llama3": ToolFormat("llama3", key="parameters", trigger=None, start="{", parallel=False),
    "mistral": ToolFormat("mistral", trigger="[TOOL_CALLS]", start="[", id_style="mistral"),
}


def detect_format(template: str | None, model_type: str = "") -> ToolFormat:
    """The tool-call format of a chat template (generic when it does not render tools)."""
    t = template or ""
    if not re.search(r"\btools\b", t):
        return FORMATS["generic"]
    if "[TOOL_CALLS]" in t:
        return FORMATS["mistral"]
    if "<tool_call>" in t:
        return FORMATS["hermes"]
    if "<|start_header_id|>" in t and ("parameters" in t or model_type == "llama"):
        return FORMATS["llama3"]
    return FORMATS["generic"]


def params_schema(parameters) -> dict:
    """A function's parameters schema as the grammar uses it: objects closed, compact JSON layout."""
    schema = closed_objects(parameters if parameters is not None else {"type": "object", "properties": {}})
    return {**schema, "x-guidance": {**JSON_STYLE, **(schema.get("x-guidance") or {})}}


def _lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a Lark string literal


def _special_token(tokenizer, text: str) -> int | None:
    """The id of `text` when the tokenizer has it as one special (added) token, else None."""
    tid = tokenizer.token_to_id(text) if hasattr(tokenizer, "token_to_id") else None
    if tid is None:
        return None
    decoder = tokenizer.get_added_tokens_decoder() if hasattr(tokenizer, "get_added_tokens_decoder") else {}
    tok = decoder.get(tid)
    return tid if tok is not None and getattr(tok, "special", False) else None


def _up_to(item: str, n: int) -> str:
    """Lark for at most n more `item`s in a row (nested optionals: llguidance's Lark has no bounded repetition)."""
    out = ""
    for _ in range(n):
        out = f" ({item}{out})?"
    return out


def grammar(fmt: ToolFormat, functions: list, choice: str, parallel: bool, response=None,
            tokenizer=None, max_calls: int = 4) -> str:
    """The Lark grammar of an answer: functions [(name, parameters)], choice "auto"/"required"/a name;
    response: a response_format schema the non-call answer follows instead of free text (auto only); at most
    max_calls calls when parallel."""
    if choice not in ("auto", "required"):
        functions = [f for f in functions if f[0] == choice]
    many = parallel and fmt.parallel and choice in ("auto", "required") and max_calls > 1
    rules = []
    for k, (name, parameters) in enumerate(functions):
        head = '{"name": ' + json.dumps(name) + ', "' + fmt.key + '": '
        rules.append(f'fn_{k}: {_lit(head)} args_{k} "}}"')
        rules.append(f"args_{k}: %json {json.dumps(params_schema(parameters), ensure_ascii=False)}")
    rules.append("call: " + " | ".join(f"fn_{k}" for k in range(len(functions))))
    if fmt.family in ("hermes", "generic"):
        rules.append('block: "<tool_call>\\n" call "\\n</tool_call>"')
        more = _up_to('"\\n" block', max_calls - 1) if many else ""
        calls = "block" + more
        if choice != "auto":
            start = calls
        elif response is not None:
            start = f"resp | {calls}"
        else:
            start = 'TEXT | head call "\\n</tool_call>"' + more
            rules.append("TEXT: " + NO_TRIGGER.format(t="<tool_call>"))
            rules.append('head[lazy]: TEXT "<tool_call>\\n"')
    elif fmt.family == "llama3":
        start = "call" if choice != "auto" else "call | TEXT"
        rules.append("TEXT: /([^{](?s:.*))?/")  # free text does not start like a call
    else:  # mistral
        tid = _special_token(tokenizer, "[TOOL_CALLS]") if tokenizer is not None else None
        opener = f"<[{tid}]>" if tid is not None else _lit("[TOOL_CALLS]")
        calls = f'{opener} "[" call' + (_up_to('", " call', max_calls - 1) if many else "") + ' "]"'
        start = calls if choice != "auto" else f"{calls} | TEXT"
        rules.append(r"TEXT: /([^\[](?s:.*))?/")
    if response is not None:
        rules.append(f"resp: %json {json.dumps(response, ensure_ascii=False)}")
    return "\n".join([f"start: {start}"] + rules) + "\n"


_SCHEMA_ERRORS: dict = {}  # (model id, schema text) -> llguidance's message ("" when it compiles)


def _schema_error(model, text: str) -> str:
    key = (id(model), text)
    if key not in _SCHEMA_ERRORS:
        if len(_SCHEMA_ERRORS) > 512:
            _SCHEMA_ERRORS.clear()
        _SCHEMA_ERRORS[key] = _compile_error(model, text)
    return _SCHEMA_ERRORS[key]


def _compile_error(model, text: str) -> str:
    try:
        Constraint.from_request(model, lark=f"start: a\na: %json {text}\n")
    except (PieGpuError, ValueError) as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        msg = next((ln for ln in lines if "JSON schema" in ln or "json" in ln.lower()), lines[0] if lines else str(e))
        return re.sub(r"^(lark: )?at \d+\(\d+\): ", "", msg)
    return ""


def check_functions(model, functions: list) -> None:
    """400 naming the tool whose parameters schema llguidance cannot compile (with llguidance's message)."""
    for k, (name, parameters) in enumerate(functions):
        try:
            err = _schema_error(model, json.dumps(params_schema(parameters), ensure_ascii=False, allow_nan=False))
        except ValueError as e:  # NaN / Infinity: not JSON
            err = str(e)
        if err:
            raise ServerError(400, f"tools[{k}] (function {name!r}): its parameters schema cannot constrain the "
                                   f"arguments: {err}. Fix the schema (or leave the unsupported keyword out)",
                              f"tools[{k}].function.parameters")


def _args_value(arguments: str):
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return arguments


def _mistral_id(raw: str) -> str:
    return raw if re.fullmatch(r"[a-zA-Z0-9]{9}", raw) else hashlib.sha1(raw.encode()).hexdigest()[:9]


def _block(name: str, arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def template_messages(req, fmt: ToolFormat, tools: list) -> list:
    """The request's messages for the chat template: tool calls and results in the family's shape
    (generic: as text, with the tools block in the system prompt)."""
    out: list = []
    names: dict = {}  # call id -> function name
    last_legacy: dict = {}  # function name -> the id made up for its legacy function_call
    for k, m in enumerate(req.messages):
        role = "system" if m.role == "developer" else m.role
        calls = [(c.id, c.function.name, c.function.arguments) for c in (m.tool_calls or [])]
        if m.function_call is not None:
            cid = f"call{k:05d}"
            last_legacy[m.function_call.name] = cid
            calls.append((cid, m.function_call.name, m.function_call.arguments))
        call_ref = m.tool_call_id
        if role == "function":  # legacy function result
            role, call_ref = "tool", last_legacy.get(m.name or "", m.name or "call")
        for cid, name, _ in calls:
            names[cid] = name
        ident = _mistral_id if fmt.id_style == "mistral" else (lambda x: x)
        if not fmt.in_template:
            if calls:
                text = m.text()
                blocks = "\n".join(_block(n, _args_value(a)) for _, n, a in calls)
                out.append({"role": "assistant", "content": (text + "\n" if text else "") + blocks})
            elif role == "tool":
                resp = f"<tool_response>\n{m.text()}\n</tool_response>"
                if out and out[-1].get("_tool"):
                    out[-1]["content"] += "\n" + resp
                else:
                    out.append({"role": "user", "content": resp, "_tool": True})
            else:
                out.append({"role": role, "content": m.text()})
            continue
        msg = {"role": role, "content": m.text()}
        if calls:
            msg["tool_calls"] = [{"id": ident(cid), "type": "function",
                                  "function": {"name": n, "arguments": _args_value(a)}} for cid, n, a in calls]
        if role == "tool":
            msg["tool_call_id"] = ident(call_ref or "")
            name = m.name or names.get(call_ref or "")
            if name:
                msg["name"] = name
        out.append(msg)
    for msg in out:
        msg.pop("_tool", None)
    if tools and not fmt.in_template:
        block = GENERIC_PROMPT.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + block}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


@dataclass
class ToolPlan:
    """What a chat request with tools (or tool messages) needs: its template input, grammar and answer shape."""

    fmt: ToolFormat
    messages: list
    template_tools: list | None  # the template's `tools` variable (None: rendered by piegpu, or no tools)
    grammar: str | None  # the Lark grammar of the answer (None: unconstrained)
    legacy: bool

    def shape(self, base: object) -> object:
        """The response shape: ToolChat when the answer may hold calls, else `base` (the plain chat shape)."""
        if self.grammar is None:
            return base
        return ToolChat(base, self.fmt.parser, self.legacy)


def check_request(req) -> None:
    """400 naming the problem for tool fields that do not fit together."""
    if req.legacy() and (req.tools is not None or req.tool_choice is not None):
        raise ServerError(400, "pass tools / tool_choice or the legacy functions / function_call, not both", "tools")
    where = "functions" if req.legacy() else "tools"
    names = [t.function.name for t in req.tool_list()]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ServerError(400, f"{where}: function names must be unique; {dup} appear more than once", where)
    choice, param = req.choice(), "function_call" if req.legacy() else "tool_choice"
    if choice not in ("none", "auto") and not names:
        raise ServerError(400, f"{param} {choice!r} needs {where}; pass {where}, or leave {param} out", param)
    if choice not in ("none", "auto", "required") and choice not in names:
        raise ServerError(400, f"{param} names function {choice!r}, which is not among the {where} {names}; name one "
                               "of them", param)
    rf = req.response_format
    if choice not in ("none", "auto") and rf is not None and rf.type != "text":
        raise ServerError(400, f"response_format {rf.type} cannot be combined with {param} {choice!r} (the answer "
                               f"must be a tool call); drop response_format, or use {param} auto or none",
                          "response_format")


def plan(req, model) -> ToolPlan | None:
    """The ToolPlan of a chat request (None when it has neither tools nor tool messages); 400 for bad tools."""
    check_request(req)
    tools = req.tool_list()
    history = any(m.tool_calls or m.function_call or m.role in ("tool", "function") for m in req.messages)
    if not tools and not history:
        return None
    template = getattr(model, "chat_template", None)
    fmt = detect_format(template, getattr(getattr(model, "config", None), "model_type", "") or "")
    tool_dicts = [t.model_dump(exclude_none=True) for t in tools]
    functions = [(t.function.name, t.function.parameters) for t in tools]
    choice = req.choice() if tools else "none"
    text = None
    if choice != "none":
        check_functions(model, functions)
        response = None
        rf = req.response_format
        if rf is not None and rf.type != "text":
            if fmt.family not in ("hermes", "generic"):
                raise ServerError(400, f"response_format with tools is not supported for this model's tool format "
                                       f"({fmt.family}): an answer in JSON would read as a tool call. Pass "
                                       "tool_choice none, or drop response_format", "response_format")
            from .protocol import parse_schema
            response = {"type": "object"} if rf.type == "json_object" else parse_schema(rf)
            response = {**closed_objects(response), "x-guidance": JSON_STYLE} if isinstance(response, dict) \
                else response
        text = grammar(fmt, functions, choice, req.parallel_tool_calls and not req.legacy(), response,
                       model.tokenizer, req.max_parallel_tool_calls)
        req._tool_grammar = text
    return ToolPlan(fmt, template_messages(req, fmt, tool_dicts), tool_dicts if fmt.in_template and tools else None,
                    text, req.legacy())
