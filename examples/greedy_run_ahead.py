"""The device decode loop of API.md: greedy tokens fed back on the device, run ahead of the host.

    python examples/greedy_run_ahead.py "Once upon a time" 48
"""

import asyncio
import sys

import piegpu
from piegpu import Channel, ForwardPass, StateGeometry, channel_capacity, dtype
from piegpu.eta import intrinsics, reduce_argmax, reshape


async def main(prompt: str, max_tokens: int) -> list:
    model = piegpu.load_model()
    pipe = model.pipeline()
    ws = model.working_set()
    ids = model.tokenizer.encode(prompt).ids
    stop_tokens = set(model.config.eos_token_ids)

    # Prefill every prompt token but the last in one pass (no epilogue needed).
    if len(ids) > 1:
        prefill = ForwardPass()
        prefill.embed(Channel.from_(ids[:-1], dtype.i32), Channel.from_([0, len(ids) - 1], dtype.u32))
        prefill.state([ws], StateGeometry.folding())
        await pipe.submit(prefill)

    token_in = Channel.from_([ids[-1]], dtype.i32)           # seeded: one full cell
    token_out = Channel([1], dtype.i32).capacity(channel_capacity())

    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_([0, 1], dtype.u32))    # token ids + CSR offsets
    fwd.state([ws], StateGeometry.folding())                 # append to the KV state each pass

    @fwd.epilogue
    def _():
        token = reshape(reduce_argmax(intrinsics.output(0, "logits")), [1])
        token_in.put(token)    # device to device: feeds the next pass
        token_out.put(token)   # device to host

    out = []

    async def on_token():
        token = await token_out.take_scalar()
        out.append(token)
        print(model.tokenizer.decode([token]), end="", flush=True)
        return token not in stop_tokens   # False stops decoding

    await pipe.run_ahead(fwd, max_tokens, on_token)
    print()
    return out


if __name__ == "__main__":
    prompt = sys.argv[1] if len(sys.argv) > 1 else "Once upon a time"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 48
    asyncio.run(main(prompt, n))
