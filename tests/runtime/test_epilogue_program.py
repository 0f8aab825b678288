"""Containers from any tracer run in the runtime: fwd.epilogue_program binds their channels by name, and
model.generate(sampler=prog) runs a (logits, state) -> token container. The top-a sampler written in JS and
in Rust draws exactly the tokens of examples/top_a.py, through the same kernel cache entries."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

import piegpu
from piegpu import Channel, ForwardPass, ValidationError, dtype, eta
from piegpu.eta import IntrinsicContext, intrinsics
from piegpu.samplers.program import ProgramSampler
from tests.sdk.foreign import js_output, rust_example
from tests.helpers import run_ahead_tokens
from tests.sdk.make_corpus import ROOT

V = 49152
PROMPT = "Once upon a time"


def _greedy_loop(vocab: int = V) -> eta.Program:
    token_in, token_out = Channel([1], dtype.i32).named("token_in"), Channel([1], dtype.i32).named("token_out")

    def fn():
        token = eta.reshape(eta.reduce_argmax(intrinsics.output(0, "logits")), [1])
        token_in.put(token)
        token_out.put(token)
    return eta.Program.from_bytes(eta.trace(fn, context=IntrinsicContext.for_logits(vocab)).to_bytes())


def test_channels_bind_by_name_and_a_missing_extra_or_mistyped_one_is_a_clear_error():
    prog = _greedy_loop()
    ok = {"token_in": Channel([1], dtype.i32), "token_out": Channel([1], dtype.i32)}
    fwd = ForwardPass()
    assert fwd.epilogue_program(prog.to_bytes(), channels=ok) == prog  # bytes are decoded
    with pytest.raises(ValidationError, match=r"uses channel\(s\) \['token_out'\].*Fix: channels=\{'token_in': ch, 'token_out': ch\}"):
        fwd.epilogue_program(prog, channels={"token_in": ok["token_in"]})
    with pytest.raises(ValidationError, match=r"binds \['tokens_out'\], which the program does not declare"):
        fwd.epilogue_program(prog, channels={**ok, "tokens_out": Channel([1], dtype.i32)})
    with pytest.raises(ValidationError, match=r"channel 'token_out' holds f32\[1\] cells but the program declares it "
                                              r"i32\[1\].*Fix: bind a Channel\(\[1\], dtype.i32\)"):
        fwd.epilogue_program(prog, channels={**ok, "token_out": Channel([1], dtype.f32)})
    with pytest.raises(ValidationError, match=r"channels\['token_in'\] is list, not a Channel"):
        fwd.epilogue_program(prog, channels={**ok, "token_in": [1]})
    with pytest.raises(ValidationError, match="bound to two names"):
        fwd.epilogue_program(prog, channels={"token_in": ok["token_in"], "token_out": ok["token_in"]})
    sampler = eta.trace(lambda x, s: eta.gumbel_max(x, s), eta.spec([V], dtype.f32), eta.spec([2], dtype.u32))
    with pytest.raises(ValidationError, match="takes 2 positional input.*sampler=prog"):
        fwd.epilogue_program(sampler)
    with pytest.raises(ValidationError, match="truncated"):
        fwd.epilogue_program(prog.to_bytes()[:-1], channels=ok)
    with pytest.raises(ValidationError, match="expected an eta.Program or container bytes"):
        fwd.epilogue_program("greedy.eta")


def test_a_sampler_program_with_the_wrong_signature_is_a_clear_error():
    S = eta.spec
    good = eta.trace(lambda x, s: eta.gumbel_max(x, s), S([V], dtype.f32), S([2], dtype.u32))
    assert ProgramSampler(good, V).name == f"program {good.hash[:12]}"
    assert ProgramSampler(good, V) == ProgramSampler(good.to_bytes(), V)
    bad = {
        "vocab": eta.trace(lambda x, s: eta.gumbel_max(x, s), S([16], dtype.f32), S([2], dtype.u32)),
        "one input": eta.trace(lambda x: eta.reduce_argmax(x), S([V], dtype.f32)),
        "float token": eta.trace(lambda x, s: eta.reduce_max(x), S([V], dtype.f32), S([2], dtype.u32)),
        "two outputs": eta.trace(lambda x, s: (eta.gumbel_max(x, s), eta.reduce_argmax(x)), S([V], dtype.f32),
                                 S([2], dtype.u32)),
    }
    for what, prog in bad.items():
        with pytest.raises(ValidationError, match=r"signature \(logits f32\[49152\], state u32\[2\]\) -> i32 token.*Fix"):
            ProgramSampler(prog, V)
    ch = Channel([1], dtype.i32).named("out")
    with_channel = eta.trace(lambda x, s: (ch.put(eta.reshape(eta.reduce_argmax(x), [1])), eta.gumbel_max(x, s))[1],
                             S([V], dtype.f32), S([2], dtype.u32))
    with pytest.raises(ValidationError, match=r"uses channels \['out'\].*epilogue_program"):
        ProgramSampler(with_channel, V)
    with pytest.raises(ValidationError, match="temperature, sampler parameters and watermark do not apply"):
        ProgramSampler(good, V, temperature=0.7)


def test_a_signature_error_comes_from_generate_before_any_pass(default_model):
    prog = eta.trace(lambda x, s: eta.gumbel_max(x, s), eta.spec([16], dtype.f32), eta.spec([2], dtype.u32))
    with pytest.raises(ValidationError, match=r"f32\[49152\]"):
        default_model.generate(PROMPT, max_tokens=2, sampler=prog)


def _top_a_example():
    spec = importlib.util.spec_from_file_location("top_a_example", ROOT / "examples" / "top_a.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


async def _device_loop(model, prog, n: int) -> list:
    ids = model.tokenizer.encode(PROMPT).ids
    pipe = model.pipeline()
    ws = model.working_set(len(ids) + n + 1)
    # the example's prefill and decode pass, with the program as its epilogue instead of the Python one
    fwd, token_in, token_out = await _top_a_example().decode_pass(pipe, ws, ids)
    fwd.epilogue_program(prog, channels={"token_in": token_in, "token_out": token_out})
    return await run_ahead_tokens(pipe, fwd, token_out, n)


def test_the_greedy_loop_written_in_js_and_in_rust_runs_as_an_epilogue(default_model):
    n = 10
    want = default_model.generate(PROMPT, max_tokens=n, sampler="greedy")
    want.run()
    for made in (js_output("examples/greedy_loop.js"), rust_example("greedy_loop")):
        prog = eta.Program.from_bytes(made)
        assert prog == _greedy_loop()
        assert asyncio.run(_device_loop(default_model, prog, n))[:len(want.tokens)] == want.tokens


def test_top_a_in_js_and_rust_draws_what_python_draws_through_the_same_kernel_cache_entries(
        default_model, monkeypatch, tmp_path, capsys):
    n, seed = 16, 7
    example = _top_a_example()
    monkeypatch.setattr(piegpu, "load_model", lambda *a, **k: default_model)  # the example loads the default model
    python_tokens = asyncio.run(example.main(PROMPT, n, seed))
    capsys.readouterr()
    eos = set(default_model.config.eos_token_ids)
    if python_tokens[-1] in eos:
        python_tokens = python_tokens[:-1]

    progs = {"python": eta.trace(example.top_a, *example.top_a.eta_specs),
             "js": eta.Program.from_bytes(js_output("examples/top_a.js")),
             "rust": eta.Program.from_bytes(rust_example("top_a"))}
    assert len({p.hash for p in progs.values()}) == 1

    # A fresh kernel cache (memory and disk): each program the three generations compile is emitted once.
    from piegpu.eta import cache
    monkeypatch.setenv("PIEGPU_CACHE_DIR", str(tmp_path))
    cache.clear_memory_cache()
    real_get, lookups = cache.get, []

    def spy(key, build, load):
        before = cache.cache_stats()
        obj = real_get(key, build, load)
        lookups[-1].append((key, "miss" if cache.cache_stats()["misses"] > before["misses"] else "hit"))
        return obj

    monkeypatch.setattr(cache, "get", spy)
    for lang, prog in progs.items():
        lookups.append([])
        g = default_model.generate(PROMPT, max_tokens=n, sampler=prog, seed=seed,
                                   working_set=default_model.working_set(64))  # a new session: a new decode loop
        g.run()
        assert g.tokens == python_tokens, lang
    first, *later = lookups
    assert first and all(outcome == "miss" for _, outcome in first)
    for run in later:
        assert [k for k, _ in run] == [k for k, _ in first]  # the same programs, hence the same cache keys
        assert all(outcome == "hit" for _, outcome in run)
    cache.clear_memory_cache()  # later tests must not load kernels of a deleted cache dir


def test_sampler_programs_run_per_row_in_batches_and_n_samples(default_model):
    """generate_batch(sampler=prog) and n= run the program on every row; each row equals the prompt alone."""
    prog = eta.trace(lambda x, s: eta.gumbel_max(x, s), eta.spec([V], dtype.f32), eta.spec([2], dtype.u32))

    def alone(prompt, seed):
        g = default_model.generate(prompt, max_tokens=3, sampler=prog, seed=seed)
        g.run()
        return g.tokens
    gens = default_model.generate_batch([PROMPT, "The sky is"], max_tokens=3, sampler=prog, seed=5)
    assert [g.tokens for g in gens] == [alone(PROMPT, 5), alone("The sky is", 5)]
    s = default_model.generate(PROMPT, max_tokens=3, sampler=prog, n=2, seed=8)
    s.run()
    assert [g.tokens for g in s.samples] == [alone(PROMPT, 8), alone(PROMPT, 9)]
    with pytest.raises(ValidationError, match="cannot take a grammar"):
        default_model.generate(PROMPT, max_tokens=2, sampler=prog, regex="[a-z]+")
