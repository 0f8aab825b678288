"""OpenAI tool calling on `piegpu serve`: formats per model family, the tool-call grammar, the answer's parsing,
and real servers (the default model's generic format; the tiny Qwen2 model under Qwen 2.5's own template)."""

from __future__ import annotations

import json
import random
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.server.conftest import MODEL_ID, ServerProcess

openai = pytest.importorskip("openai", reason="the server tests drive the official openai client: pip install openai")
jsonschema = pytest.importorskip("jsonschema")

from piegpu.inferlets.grammar import Constraint  # noqa: E402
from piegpu.model.tokenizer import SMOLLM2_CHAT_TEMPLATE, chat_prompt  # noqa: E402
from piegpu.server import tools as T  # noqa: E402
from piegpu.server.protocol import ChatCompletionRequest  # noqa: E402
from piegpu.server.toolcalls import parse_answer  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
QWEN_TEMPLATE = (FIXTURES / "chat_templates" / "qwen2.5-instruct.jinja").read_text(encoding="utf-8")
LLAMA3_TEMPLATE = json.loads((FIXTURES / "models" / "tokenizers" / "chat_templates.json").read_text())["llama3"][
    "template"]


def fn(name: str, description: str, properties: dict, required=None) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(required or properties)}}}


WEATHER = fn("get_weather", "Get the current weather in a city",
             {"city": {"type": "string", "maxLength": 24},
              "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}})
ADD = fn("add", "Add two integers", {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                     "b": {"type": "integer", "minimum": 0, "maximum": 999}})
SEARCH = fn("search", "Search the web", {"query": {"type": "string", "maxLength": 32},
                                         "limit": {"type": "integer", "minimum": 1, "maximum": 10}}, ["query"])
TIME = fn("get_time", "The current time in a time zone", {"zone": {"type": "string", "enum": ["UTC", "CET", "PST"]}})
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, ADD, SEARCH, TIME)}
FUNCS = [(t["function"]["name"], t["function"]["parameters"]) for t in (WEATHER, ADD)]


def tiny_tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(FIXTURES / "models" / "qwen2" / "tokenizer.json"))


def fake_model(tok):
    return SimpleNamespace(tokenizer=tok, config=SimpleNamespace(vocab_size=tok.get_vocab_size(), eos_token_ids=[2],
                                                                 model_type="qwen2"))


def accepts(model, grammar: str, text: str) -> bool:
    m = Constraint.from_request(model, lark=grammar).matcher()
    try:
        for t in model.tokenizer.encode(text).ids:
            m.consume(t)
    except Exception:  # noqa: BLE001 -- the grammar refused a token
        return False
    return m.is_accepting()


# ---- formats, grammars and parsing (no server) -------------------------------------------------------------
def test_family_detection():
    assert T.detect_format(None).family == "generic"
    assert T.detect_format(SMOLLM2_CHAT_TEMPLATE).family == "generic"  # the default model's template has no tools
    assert T.detect_format(QWEN_TEMPLATE, "qwen2").family == "hermes"
    assert T.detect_format(LLAMA3_TEMPLATE, "llama").family == "llama3"
    assert T.detect_format("{% if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]", "mistral").family == "mistral"


CALL = {"hermes": '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
        "llama3": '{"name": "add", "parameters": {"a": 1, "b": 2}}',
        "mistral": '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}]'}
TWO = {"hermes": CALL["hermes"] + '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", '
                                  '"unit": "celsius"}}\n</tool_call>',
       "mistral": '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", '
                  '"arguments": {"city": "Oslo", "unit": "celsius"}}]'}


@pytest.mark.parametrize("family", ["hermes", "llama3", "mistral"])
def test_grammar_follows_the_family_format(family):
    model = fake_model(tiny_tokenizer())
    fmt = T.FORMATS[family]
    required = T.grammar(fmt, FUNCS, "required", True, tokenizer=model.tokenizer)
    auto = T.grammar(fmt, FUNCS, "auto", True, tokenizer=model.tokenizer)
    named = T.grammar(fmt, FUNCS, "get_weather", True, tokenizer=model.tokenizer)
    assert accepts(model, required, CALL[family]) and accepts(model, auto, CALL[family])
    assert not accepts(model, required, "Hello there") and accepts(model, auto, "Hello there")
    assert not accepts(model, named, CALL[family])  # named: only get_weather
    assert not accepts(model, required, CALL[family].replace('"b": 2', '"b": 2, "c": 3'))  # arguments follow the schema
    assert not accepts(model, required, CALL[family].replace('"b": 2', '"b": "two"'))
    if family in TWO:
        assert accepts(model, required, TWO[family])
        assert not accepts(model, T.grammar(fmt, FUNCS, "required", False, tokenizer=model.tokenizer), TWO[family])
    if family == "hermes":
        assert accepts(model, auto, "Let me add them.\n" + CALL[family])  # auto: text, then the calls


@pytest.mark.parametrize("family, text, content, calls", [
    ("hermes", "Hello <tool", "Hello <tool", []),
    ("hermes", "Sure.\n\n" + TWO["hermes"], "Sure.", [("add", '{"a": 1, "b": 2}'),
                                                     ("get_weather", '{"city": "Oslo", "unit": "celsius"}')]),
    ("hermes", '<tool_call>\n{"arguments": {"x": "}{"}, "name": "f"}\n</tool_call>', None, [("f", '{"x": "}{"}')]),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"s": "a \\" b", "n": [1, {"k": null}]} }', None,
     [("f", '{"s": "a \\" b", "n": [1, {"k": null}]}')]),
    ("hermes", '<tool_call>\n{"name": "add", "arguments": {"a": 1', None, []),  # cut short: dropped
    ("hermes", TWO["hermes"][:-25], None, [("add", '{"a": 1, "b": 2}')]),  # the second call cut short
    ("llama3", CALL["llama3"], None, [("add", '{"a": 1, "b": 2}')]),
    ("llama3", 'I can {not} call', "I can {not} call", []),
    ("mistral", TWO["mistral"], None, [("add", '{"a": 1, "b": 2}'),
                                       ("get_weather", '{"city": "Oslo", "unit": "celsius"}')]),
    ("mistral", TWO["mistral"][len("[TOOL_CALLS]"):], None, [("add", '{"a": 1, "b": 2}'),  # the special token left out
                                                             ("get_weather", '{"city": "Oslo", "unit": "celsius"}')]),
])
def test_parser_splits_content_and_calls_however_the_text_arrives(family, text, content, calls):
    fmt = T.FORMATS[family]
    got_content, got_calls = parse_answer(fmt.parser(), text)
    assert got_content == content and [(n, a) for _, n, a in got_calls] == calls
    rng = random.Random(0)
    for _ in range(30):
        p, events, i = fmt.parser(), [], 0
        while i < len(text):
            j = i + rng.randint(1, 6)
            events += p.feed(text[i:j])
            i = j
        events += p.close()
        streamed = "".join(e[1] for e in events if e[0] == "content")
        assert streamed == (content or "") or (content is None and not streamed.strip())
        args: dict = {}
        for e in events:
            if e[0] == "args":
                args[e[1]] = args.get(e[1], "") + e[2]
        ended = [e[1] for e in events if e[0] == "end"]
        assert [(c[1], args.get(k, "")) for k, c in enumerate(p.calls) if k in ended] == calls
    if family == "mistral":
        assert all(len(i) == 9 and i.isalnum() for i, _, _ in got_calls)  # Mistral's template insists on these
    else:
        assert all(i.startswith("call_") for i, _, _ in got_calls)


HISTORY = [{"role": "user", "content": "What is 1 + 2?"},
           {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "3"}]


def request(**kw) -> ChatCompletionRequest:
    return ChatCompletionRequest(**{"model": "m", "messages": HISTORY, "tools": [ADD, WEATHER], **kw})


def test_messages_render_through_the_qwen_template():
    req = request()
    fmt = T.detect_format(QWEN_TEMPLATE)
    msgs = T.template_messages(req, fmt, [t.model_dump(exclude_none=True) for t in req.tool_list()])
    text = chat_prompt(msgs, True, QWEN_TEMPLATE, tools=[ADD, WEATHER])
    assert '# Tools' in text and json.dumps(ADD) in text  # the template's own tools block
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
            '<|im_end|>') in text
    assert "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text


def test_generic_format_renders_tools_in_the_system_prompt():
    req = request()
    fmt = T.detect_format(SMOLLM2_CHAT_TEMPLATE)
    msgs = T.template_messages(req, fmt, [t.model_dump(exclude_none=True) for t in req.tool_list()])
    text = chat_prompt(msgs, True, SMOLLM2_CHAT_TEMPLATE)
    assert text.startswith("<|im_start|>system\n# Tools") and json.dumps(ADD) in text
    assert "<tool_call>\n{\"name\": <function-name>" in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>" in text


def test_legacy_functions_map_onto_tools():
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                functions=[ADD["function"]], function_call={"name": "add"})
    assert req.legacy() and [t.function.name for t in req.tool_list()] == ["add"] and req.choice() == "add"
    assert request(tool_choice=None).choice() == "auto"
    assert ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}]).choice() == "none"


# ---- the default model (generic format) ---------------------------------------------------------------------
def check_calls(message, tools: list, finish: str) -> list:
    """Every call names one of the tools and its arguments validate against that tool's schema (a call cut off by
    max_tokens is never returned)."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    calls = message.tool_calls or []
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_") and call.function.name in schemas
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    return calls


CASES = [  # (question, tools, tool_choice, parallel_tool_calls)
    ("What is the weather in Paris?", [WEATHER, ADD], "required", False),
    ("What is 17 plus 25?", [WEATHER, ADD], "required", False),
    ("Find news about robots.", [WEATHER, ADD, SEARCH], "required", False),
    ("What time is it in Berlin?", [TIME, WEATHER], {"type": "function", "function": {"name": "get_time"}}, True),
    ("Add 3 and 4.", [ADD, SEARCH, TIME], {"type": "function", "function": {"name": "add"}}, True),
    ("Weather in Tokyo and in Oslo, please.", [WEATHER, TIME], "required", True),
    ("What is the weather in Rome?", [WEATHER, ADD], "auto", True),
    ("Hello! How are you today?", [WEATHER, ADD], "auto", True),
    ("Search the web for pasta recipes.", [SEARCH, TIME, ADD], "auto", False),
    ("What is 100 plus 23?", [ADD, WEATHER], None, True),  # tool_choice left out: auto
]


@pytest.mark.parametrize("question, tools, choice, parallel", CASES, ids=[c[0][:24] for c in CASES])
def test_default_model_tool_calls_parse_and_validate(server, question, tools, choice, parallel):
    c = server.client()
    kw = {"tool_choice": choice} if choice is not None else {}
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": question}], tools=tools,
                                  parallel_tool_calls=parallel, max_tokens=64, temperature=0, **kw)
    ch = r.choices[0]
    calls = check_calls(ch.message, tools, ch.finish_reason)
    if choice not in (None, "auto"):
        assert calls, f"tool_choice {choice} must call: {ch.message}"
        assert ch.finish_reason in ("tool_calls", "length") and ch.message.content is None
        if not parallel:
            assert len(calls) == 1 and ch.finish_reason == "tool_calls"
    if isinstance(choice, dict):
        assert {x.function.name for x in calls} == {choice["function"]["name"]}
    if not calls:
        assert ch.finish_reason in ("stop", "length") and ch.message.content
    elif ch.finish_reason != "length":
        assert ch.finish_reason == "tool_calls"


def test_parallel_calls_are_bounded_and_never_cut(server):
    """tool_choice required, two tools, sampled, a budget parallel calls can overrun: at most max_parallel_tool_calls
    calls, each parsing and validating, streamed exactly as answered whole (a call cut by the budget is dropped)."""
    c = server.client()
    for seed in (1, 2, 3):
        kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Weather in Oslo, Rome and Lima? Add 2 and 3."}],
                  tools=[WEATHER, ADD], tool_choice="required", max_tokens=96, temperature=0.8, seed=seed)
        for bound in (None, 2):
            extra = {} if bound is None else {"extra_body": {"max_parallel_tool_calls": bound}}
            whole = c.chat.completions.create(**kw, **extra).choices[0]
            calls = check_calls(whole.message, [WEATHER, ADD], whole.finish_reason)
            assert len(calls) <= (bound or 4), (seed, bound, calls)
            streamed: dict = {}
            for chunk in c.chat.completions.create(stream=True, **kw, **extra):
                for ch in chunk.choices:
                    for tc in ch.delta.tool_calls or []:
                        streamed.setdefault(tc.index, ["", ""])
                        streamed[tc.index][0] += tc.function.name or ""
                        streamed[tc.index][1] += tc.function.arguments or ""
            assert [streamed[k] for k in sorted(streamed)] == [[t.function.name, t.function.arguments] for t in calls]


def test_tool_choice_none_answers_in_text_and_a_second_turn_gets_an_answer(server):
    c = server.client()
    msgs = [{"role": "user", "content": "What is 12 plus 30?"}]
    r = c.chat.completions.create(model=MODEL_ID, messages=msgs, tools=[ADD, WEATHER], tool_choice="none",
                                  max_tokens=12, temperature=0)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content
    r = c.chat.completions.create(model=MODEL_ID, messages=msgs, tools=[ADD, WEATHER], tool_choice="required",
                                  parallel_tool_calls=False, max_tokens=48, temperature=0)
    call = r.choices[0].message.tool_calls[0]
    msgs += [r.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"result": 42})}]
    r2 = c.chat.completions.create(model=MODEL_ID, messages=msgs, tools=[ADD, WEATHER], max_tokens=24, temperature=0)
    assert r2.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r2.choices[0].message.content or r2.choices[0].message.tool_calls
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens  # the call and its result are in the prompt


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_streamed_tool_calls_reassemble_to_the_answer(server, choice):
    c = server.client()
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "What is the weather in Madrid? Use a tool."}],
              tools=[WEATHER, ADD], tool_choice=choice, max_tokens=40, temperature=0.9, seed=11)
    whole = c.chat.completions.create(**kw).choices[0]
    calls: dict = {}
    content, finish, ids = "", None, {}
    for chunk in c.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                if tc.id is not None:  # the first delta of a call: id, type, name, empty arguments
                    assert tc.index not in calls and tc.type == "function" and tc.function.arguments == ""
                    calls[tc.index] = [tc.function.name, ""]
                    ids[tc.index] = tc.id
                else:
                    calls[tc.index][1] += tc.function.arguments
    want = [[t.function.name, t.function.arguments] for t in whole.message.tool_calls or []]
    assert [calls[k] for k in sorted(calls)] == want
    assert (content or None) == whole.message.content and finish == whole.finish_reason
    assert all(i.startswith("call_") for i in ids.values())
    if choice == "required":
        assert want and finish in ("tool_calls", "length")


def test_legacy_functions_answer_with_function_call(server):
    c = server.client()
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Add 2 and 2."}],
                                  functions=[ADD["function"]], function_call={"name": "add"}, max_tokens=40,
                                  temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "function_call" and ch.message.function_call.name == "add"
    jsonschema.validate(json.loads(ch.message.function_call.arguments), SCHEMAS["add"])


def post(server, body) -> tuple:
    req = urllib.request.Request(server.url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


BAD_SCHEMA = fn("broken", "x", {"when": {"type": "string", "format": "no-such-format"}})
BAD = [
    ("unknown named function", dict(tools=[ADD], tool_choice={"type": "function", "function": {"name": "nope"}}),
     "nope"),
    ("required without tools", dict(tool_choice="required"), "needs tools"),
    ("uncompilable parameters schema", dict(tools=[ADD, BAD_SCHEMA]), "broken"),
    ("response_format with required", dict(tools=[ADD], tool_choice="required",
                                           response_format={"type": "json_object"}), "response_format"),
    ("grammar with tools", dict(tools=[ADD], grammar='root ::= "a"'), "grammar"),
    ("tools and functions", dict(tools=[ADD], functions=[ADD["function"]]), "not both"),
    ("duplicate names", dict(tools=[ADD, ADD]), "unique"),
    ("bad function name", dict(tools=[fn("no spaces allowed", "x", {})]), "tools"),
    ("tool message without tool_call_id", dict(messages=[{"role": "user", "content": "x"},
                                                         {"role": "tool", "content": "3"}]), "tool_call_id"),
]


@pytest.mark.parametrize("what, extra, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_tool_requests_get_a_400_naming_the_problem(server, what, extra, needle):
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    status, out = post(server, body)
    assert status == 400 and out["error"]["type"] == "invalid_request_error"
    assert needle in out["error"]["message"] + str(out["error"]["param"]), out
    if what == "uncompilable parameters schema":
        assert "no-such-format" in out["error"]["message"]  # llguidance's own message
    status, _ = post(server, {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert status == 200  # nothing else affected


# ---- the tiny Qwen2 model under Qwen 2.5's chat template --------------------------------------------------
@pytest.fixture(scope="module")
def qwen_server(tmp_path_factory, gpu):
    d = tmp_path_factory.mktemp("qwen2-instruct")
    for f in (FIXTURES / "models" / "qwen2").iterdir():
        if f.suffix in (".json", ".safetensors") and f.name != "fixture.json":
            shutil.copy(f, d / f.name)
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": QWEN_TEMPLATE}))
    config = json.loads((d / "config.json").read_text())  # its byte-sized tokens make Qwen's tools prompt long
    (d / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}))
    s = ServerProcess("--model", str(d), "--model-id", "tiny-qwen", timeout=120)
    yield s
    s.stop()


# the tiny model's random text in a free string spends many byte-sized tokens: enums and small numbers only
CITY = fn("get_weather", "Get the current weather in a city", {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                                                "unit": {"type": "string", "enum": ["C", "F"]}})
SUM = fn("add", "Add two integers", {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                     "b": {"type": "integer", "minimum": 0, "maximum": 99}})


def test_qwen_template_tool_calls_parse_and_validate(qwen_server):
    c = qwen_server.client()
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = None
    for choice, parallel in (("required", False), ({"type": "function", "function": {"name": "add"}}, False),
                             ("required", True), ("auto", True)):
        r = c.chat.completions.create(model="tiny-qwen", messages=msgs, tools=[CITY, SUM], tool_choice=choice,
                                      parallel_tool_calls=parallel, max_tokens=120, temperature=0.7, seed=3)
        ch = r.choices[0]
        calls = check_calls(ch.message, [CITY, SUM], ch.finish_reason)
        if choice != "auto":
            assert calls and ch.message.content is None
        if not parallel:
            assert len(calls) == 1 and ch.finish_reason == "tool_calls"
        if isinstance(choice, dict):
            assert calls[0].function.name == "add"
        first = first or r
    # a second turn through the template's tool_calls and tool branches
    message = first.choices[0].message
    msgs += [message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "sunny"}]
    r2 = c.chat.completions.create(model="tiny-qwen", messages=msgs, tools=[CITY, SUM], max_tokens=8, temperature=0)
    assert r2.usage.prompt_tokens > first.usage.prompt_tokens + 20
