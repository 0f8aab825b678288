"""Top-a sampling as a device epilogue: keep tokens with p >= a * p_max^2, sample with Gumbel-max.

The sampler runs on the GPU in the same command encoder as the forward pass; its RNG
state [key, counter] is loop-carried in a channel, so no logits and no RNG state ever
cross to the host -- only the sampled token.

    python examples/top_a.py "Once upon a time" --a 0.2 --temperature 0.8 --seed 7
    piegpu compile examples/top_a.py:top_a --target wgsl
"""

import argparse
import asyncio

import piegpu
from piegpu import Channel, ForwardPass, StateGeometry, channel_capacity, dtype, eta
from piegpu.eta import intrinsics

A = 0.2
TEMPERATURE = 0.8


def top_a(logits, state):
    """The top-a sampler: a token id drawn from the kept part of softmax(logits / T)."""
    x = eta.sanitize(logits) * (1.0 / TEMPERATURE)
    probs = eta.softmax(x)
    pmax = eta.reduce_max(probs)
    keep = probs >= eta.broadcast(eta.reshape(pmax * pmax * A, [1]), list(probs.shape))
    return eta.gumbel_max(eta.mask_apply(x, keep), state)


top_a.eta_specs = (eta.spec([49152], dtype.f32), eta.spec([2], dtype.u32))


async def decode_pass(pipe, ws, ids: list) -> tuple:
    """Prefill `ids` but the last; (fwd, token_in, token_out): a pass embedding token_in (seeded with the last id)."""
    if len(ids) > 1:
        prefill = ForwardPass()
        prefill.embed(Channel.from_(ids[:-1], dtype.i32), Channel.from_([0, len(ids) - 1], dtype.u32))
        prefill.state([ws], StateGeometry.folding())
        await pipe.submit(prefill)

    token_in = Channel.from_([ids[-1]], dtype.i32)
    token_out = Channel([1], dtype.i32).capacity(channel_capacity())
    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_([0, 1], dtype.u32))
    fwd.state([ws], StateGeometry.folding())
    return fwd, token_in, token_out


async def main(prompt: str, max_tokens: int, seed: int) -> list:
    model = piegpu.load_model()
    pipe = model.pipeline()
    ids = model.tokenizer.encode(prompt).ids
    ws = model.working_set(len(ids) + max_tokens + 1)
    fwd, token_in, token_out = await decode_pass(pipe, ws, ids)
    rng = Channel.from_([seed, 0], dtype.u32)  # [key, counter], advanced on the device

    @fwd.epilogue
    def _():
        state = rng.take()
        token = eta.reshape(top_a(intrinsics.output(0, "logits"), state), [1])
        rng.put(eta.concat([eta.slice_last(state, 0, 1), eta.slice_last(state, 1, 1) + 1]))
        token_in.put(token)
        token_out.put(token)

    out = []
    stop = set(model.config.eos_token_ids)

    async def on_token():
        t = await token_out.take_scalar()
        out.append(t)
        if t in stop:
            return False
        print(model.tokenizer.decode([t]), end="", flush=True)
        return True

    await pipe.run_ahead(fwd, max_tokens, on_token)
    print()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Once upon a time")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--a", type=float, default=A)
    ap.add_argument("--temperature", type=float, default=TEMPERATURE)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    A, TEMPERATURE = args.a, args.temperature
    asyncio.run(main(args.prompt, args.max_tokens, args.seed))
