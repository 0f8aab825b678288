"""Pie's containers as piegpu epilogues and samplers on the default model (lavapipe in CI)."""

from __future__ import annotations

import asyncio
import importlib.util

from piegpu import Channel, ForwardPass, StateGeometry, dtype, ptir
from tests.helpers import run_ahead_tokens
from tests.sdk.make_corpus import ROOT

from .conftest import CONTAINERS

PROMPT = "Once upon a time"


def _example():
    spec = importlib.util.spec_from_file_location("pie_nucleus", ROOT / "examples" / "pie_nucleus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _at_vocab(data: bytes, vocab: int) -> bytes:
    """A golden container (traced for a vocab of 8) with its logits-shaped values declared for `vocab`."""
    c = ptir.decode(data)
    for _, ops in c.stages:
        for op in ops:
            shape = op.fields.get("shape")
            if shape in ((1, 8), (8,)):
                op.fields["shape"] = shape[:-1] + (vocab,)
    return ptir.encode(c)


async def _greedy_loop(model, data: bytes, n: int) -> list:
    ids = model.tokenizer.encode(PROMPT).ids
    pipe, ws = model.pipeline(), model.working_set()
    prefill = ForwardPass()
    prefill.embed(Channel.from_(ids[:-1], dtype.i32), Channel.from_([0, len(ids) - 1], dtype.u32))
    prefill.state([ws], StateGeometry.folding())
    await pipe.submit(prefill)
    token_in, token_out = Channel.from_([ids[-1]], dtype.i32), Channel([1], dtype.i32).capacity(4)
    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_([0, 1], dtype.u32))
    fwd.state([ws], StateGeometry.folding())
    fwd.epilogue_program(data, channels={"chan0": token_in, "chan1": token_out})  # Pie's loop: chan0 feeds the embed
    return await run_ahead_tokens(pipe, fwd, token_out, n)


def test_pies_greedy_loop_runs_ahead_as_an_epilogue_and_matches_piegpus_greedy(default_model):
    n = 8
    want = default_model.generate(PROMPT, max_tokens=n, sampler="greedy")
    want.run()
    data = _at_vocab(CONTAINERS["greedy_argmax"], default_model.config.vocab_size)
    assert asyncio.run(_greedy_loop(default_model, data, n))[:len(want.tokens)] == want.tokens


def test_pies_nucleus_sampler_as_an_epilogue_and_as_a_sampler_program_draw_the_same_tokens(default_model):
    n, top_p, seed = 6, 0.9, 1234
    example = _example()
    data = example.nucleus_container(default_model.config.vocab_size)
    as_epilogue = asyncio.run(example.main(PROMPT, n, top_p, seed, model=default_model))
    gen = default_model.generate(PROMPT, max_tokens=n, sampler=ptir.as_sampler(data, {"chan1": top_p}), seed=seed)
    gen.run()
    assert gen.tokens == as_epilogue[:len(gen.tokens)] and len(gen.tokens) >= 3


def test_a_sampler_shaped_ptir_container_is_a_sampler_alone_and_per_row(default_model):
    """Raw PTIR bytes as sampler=: generate() and generate_batch() rows draw what Pie's greedy container says."""
    data = _at_vocab(CONTAINERS["greedy_argmax"], default_model.config.vocab_size)
    want = default_model.generate(PROMPT, max_tokens=4, sampler="greedy")
    want.run()
    g = default_model.generate(PROMPT, max_tokens=4, sampler=data)
    g.run()
    assert g.tokens == want.tokens
    gens = default_model.generate_batch([PROMPT, PROMPT], max_tokens=4, sampler=data)
    assert [x.tokens for x in gens] == [want.tokens, want.tokens]
