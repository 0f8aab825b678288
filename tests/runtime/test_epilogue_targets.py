"""A whole generation through SPIR-V epilogues gives the same tokens as through WGSL epilogues."""

from __future__ import annotations

import asyncio

from piegpu import Channel, ForwardPass, StateGeometry, dtype, eta
from piegpu.runtime.loops import decode_loop


def top_a_tokens(model, target: str, seed: int, n: int) -> list:
    """The top-a example's decode loop (examples/top_a.py) with epilogues compiled for `target`."""
    pipe = model.pipeline(target=target)
    ids = model.tokenizer.encode("Once upon a time").ids
    ws = model.working_set(len(ids) + n + 1)
    loop = asyncio.new_event_loop()
    pf = ForwardPass()
    pf.embed(Channel.from_(ids[:-1], dtype.i32), Channel.from_([0, len(ids) - 1], dtype.u32))
    pf.state([ws], StateGeometry.folding())
    loop.run_until_complete(pipe.submit(pf))
    rng = Channel.from_([seed, 0], dtype.u32)

    def top_a(logits):
        state = rng.take()
        x = eta.sanitize(logits) * (1.0 / 0.8)
        probs = eta.softmax(x)
        pmax = eta.reduce_max(probs)
        keep = probs >= eta.broadcast(eta.reshape(pmax * pmax * 0.2, [1]), list(probs.shape))
        rng.put(eta.concat([eta.slice_last(state, 0, 1), eta.slice_last(state, 1, 1) + 1]))
        return eta.gumbel_max(eta.mask_apply(x, keep), state)
    dl = decode_loop(ws, top_a, ids[-1])
    fwd, token_out = dl.fwd, dl.token_out

    out = []

    async def on_token():
        out.append(await token_out.take_scalar())
        return True
    loop.run_until_complete(pipe.run_ahead(fwd, n, on_token))
    return out


def test_top_a_same_tokens_with_spirv_and_wgsl_epilogues(default_model):
    wgsl = top_a_tokens(default_model, "wgsl", seed=11, n=16)
    spirv = top_a_tokens(default_model, "spirv", seed=11, n=16)
    print(default_model.tokenizer.decode(wgsl))
    assert wgsl == spirv
    assert len(set(wgsl)) > 4  # sampled text, not a constant
