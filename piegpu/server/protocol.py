"""The OpenAI request bodies the server accepts (pydantic models) and its OpenAI-shaped errors.

Field names, ranges and defaults follow the OpenAI API reference; llama.cpp server's sampling
fields (top_k, min_p, typical_p, repeat_penalty, mirostat, xtc_*, dry_*, top_n_sigma, dynatemp_*,
samplers...) are accepted under its names, every one as batched row data. Unknown fields are
ignored, as OpenAI does.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

MAX_STOP = 4  # OpenAI's limit on stop sequences
MAX_N = 16


class ServerError(Exception):
    """An error that becomes an OpenAI-shaped error response with `status`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error", headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind
        self.headers = headers or {}

    def body(self) -> dict:
        """The JSON body: {"error": {"message", "type", "param", "code"}}."""
        return error_body(self.message, self.kind, self.param, self.code)


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False


class JsonSchemaFormat(_Body):
    name: str = "response"
    description: Optional[str] = None
    schema_: Optional[dict] = Field(default=None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and (self.json_schema is None or self.json_schema.schema_ is None):
            raise ValueError("response_format of type json_schema needs json_schema.schema (a JSON Schema object)")
        return self


class _Sampling(_Body):
    """The fields chat and completions share."""

    model: str
    max_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = Field(default=None, ge=-(1 << 63), lt=1 << 64)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: Optional[dict[str, float]] = None
    user: Optional[str] = None
    # llama.cpp server / vLLM extensions
    top_k: int = Field(default=0, ge=-1)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repeat_penalty: float = Field(default=1.0, gt=0.0)
    repetition_penalty: Optional[float] = Field(default=None, gt=0.0)
    response_format: Optional[ResponseFormat] = None
    typical_p: float = Field(default=1.0, gt=0.0, le=1.0)  # locally typical sampling mass (1 = off)
    # llama.cpp server's sampling fields (its names and off values); every one runs as batched row data
    mirostat: Literal[0, 1, 2] = 0  # 1: Mirostat v1, 2: Mirostat v2 (llama.cpp: then only temperature + Mirostat)
    mirostat_tau: float = Field(default=5.0, gt=0.0)
    mirostat_eta: float = Field(default=0.1, gt=0.0)
    xtc_probability: float = Field(default=0.0, ge=0.0, le=1.0)
    xtc_threshold: float = Field(default=0.1, ge=0.0, le=1.0)
    dry_multiplier: float = Field(default=0.0, ge=0.0)
    dry_base: float = Field(default=1.75, ge=0.0)
    dry_allowed_length: int = Field(default=2, ge=0)
    dry_penalty_last_n: int = Field(default=-1, ge=-1)
    dry_sequence_breakers: Optional[list[str]] = None  # llama.cpp's default: newline, ':', '"', '*'
    top_n_sigma: float = -1.0  # <= 0 is off
    dynatemp_range: float = Field(default=0.0, ge=0.0)
    dynatemp_exponent: float = Field(default=1.0, ge=0.0)
    tfs_z: float = Field(default=1.0, ge=0.0, le=1.0)  # tail-free (removed from llama.cpp in late 2024; 1 = off)
    top_a: float = Field(default=0.0, ge=0.0)
    p_less: bool = False  # llama.cpp's p-less; listing "p_less" in `samplers` turns it on too
    samplers: Optional[Union[str, list[str]]] = None  # llama.cpp's sampler order, e.g. ["top_k", "top_p", "xtc"]
    sampler_program: Optional[str] = None  # piegpu: the id of a program registered at /v1/sampler-programs
    grammar: Optional[str] = None  # llama.cpp server: a GBNF (or Lark) grammar
    regex: Optional[str] = None  # vLLM's guided_regex, under llama.cpp-style naming
    json_schema: Optional[dict] = None  # llama.cpp server: a JSON Schema without response_format
    grammar_mode: Literal["auto", "device", "host"] = "auto"  # piegpu: where a constraint runs (docs/grammar.md)

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        if isinstance(v, list) and len(v) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences, got {len(v)}")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v):
        for k, b in (v or {}).items():
            if not k.strip().isdigit():
                raise ValueError(f"logit_bias keys are token ids (strings of digits), got {k!r}")
            if not -100.0 <= b <= 100.0:
                raise ValueError(f"logit_bias values are in [-100, 100], got {b} for token {k}")
        return v

    def stops(self) -> list:
        """The stop strings as a list (empty strings dropped)."""
        v = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in v if s]


class TextPart(_Body):
    type: Literal["text"]
    text: str


TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # OpenAI's rule for function names


class FunctionDef(_Body):
    name: str = Field(pattern=TOOL_NAME)
    description: Optional[str] = None
    parameters: Optional[dict] = None  # a JSON Schema object; None: the function takes no arguments
    strict: Optional[bool] = None


class Tool(_Body):
    type: Literal["function"]
    function: FunctionDef


class FunctionName(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: FunctionName


class FunctionCall(_Body):
    name: str
    arguments: str = "{}"  # JSON text, as OpenAI sends it


class ToolCall(_Body):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Optional[Union[str, list[TextPart]]] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None  # an assistant's earlier calls
    tool_call_id: Optional[str] = None  # a tool message: the call it answers
    function_call: Optional[FunctionCall] = None  # legacy: an assistant's earlier call

    @model_validator(mode="after")
    def _tool_fields(self):
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id (the id of the assistant's tool call it answers)")
        if (self.tool_calls or self.function_call) and self.role != "assistant":
            raise ValueError(f"tool_calls / function_call belong to assistant messages, not {self.role}")
        return self

    def text(self) -> str:
        """The message's text (content parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatCompletionRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(default=None, ge=0, le=20)
    tools: Optional[list[Tool]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], NamedToolChoice]] = None
    parallel_tool_calls: bool = True
    # piegpu's: the most calls one answer makes when parallel_tool_calls is on (small models repeat calls until the
    # budget ends otherwise)
    max_parallel_tool_calls: int = Field(default=4, ge=1, le=64)
    functions: Optional[list[FunctionDef]] = None  # legacy: tools
    function_call: Optional[Union[Literal["none", "auto"], FunctionName]] = None  # legacy: tool_choice
    _tool_grammar: Optional[str] = PrivateAttr(default=None)  # set by server/tools.py: the tool-call grammar

    @model_validator(mode="after")
    def _logprobs(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    def legacy(self) -> bool:
        """Whether the request uses the legacy functions / function_call fields."""
        return self.functions is not None or self.function_call is not None

    def tool_list(self) -> list:
        """The tools (legacy functions as tools)."""
        if self.functions is not None:
            return [Tool(type="function", function=f) for f in self.functions]
        return list(self.tools or [])

    def choice(self) -> str:
        """tool_choice as "none", "auto", "required" or a function's name ("auto" with tools, else "none")."""
        c = self.function_call if self.legacy() else self.tool_choice
        if c is None:
            return "auto" if self.tool_list() else "none"
        return c if isinstance(c, str) else c.function.name if isinstance(c, NamedToolChoice) else c.name

    def limit(self) -> Optional[int]:
        """max_completion_tokens, else max_tokens (None: up to the context)."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def chat_messages(self) -> list:
        """[{role, content}] for the chat template ("developer" is the system role of newer models)."""
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages]


class CompletionRequest(_Sampling):
    prompt: Union[str, list[str], list[int], list[list[int]]]
    max_tokens: Optional[int] = Field(default=16, ge=1)
    logprobs: Optional[int] = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: Optional[str] = None
    best_of: Optional[int] = Field(default=None, ge=1, le=MAX_N)

    @model_validator(mode="after")
    def _unsupported(self):
        if self.suffix:
            raise ValueError("suffix (fill-in-the-middle) is not supported by this model")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of other than n is not supported; use n")
        if self.echo and self.logprobs is not None:
            raise ValueError("echo with logprobs (the prompt's own log-probabilities) is not supported; drop one")
        if isinstance(self.prompt, list) and not self.prompt:
            raise ValueError("prompt is an empty list")
        return self

    def limit(self) -> Optional[int]:
        """max_tokens (OpenAI's default for completions is 16)."""
        return self.max_tokens


def parse_schema(fmt: ResponseFormat) -> Any:
    """The JSON schema of a json_schema response_format (a dict), checked to be a schema object."""
    schema = fmt.json_schema.schema_ if fmt.json_schema else None
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ServerError(400, f"response_format.json_schema.schema is not JSON: {e}",
                              "response_format.json_schema.schema") from None
    if not isinstance(schema, dict):
        raise ServerError(400, "response_format.json_schema.schema must be a JSON Schema object",
                          "response_format.json_schema.schema")
    return schema
