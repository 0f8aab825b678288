"""A Pie epilogue driving piegpu's default model: Pie's nucleus_sample PTIR container, on lavapipe or any GPU.

    python examples/pie_nucleus.py "Once upon a time" 24 0.9

The container is Pie's own (compiler/tests/golden/nucleus_sample.txt, traced by Pie's
Rust DSL for a vocab of 8), re-declared at the model's vocab: its channels are chan0
(u32[2] RNG state [key, counter], taken each pass), chan1 (f32 top_p, read) and chan2
(the i32[1] token the host reads). piegpu decodes it, validates it as Pie does,
translates it to eta and runs it as the pass's epilogue, with Pie's RNG bit for bit.
"""

import asyncio
import re
import sys
from pathlib import Path

import numpy as np

import piegpu
from piegpu import Channel, ForwardPass, StateGeometry, dtype, ptir

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "ptir" / "nucleus_sample.txt"


def nucleus_container(vocab: int) -> bytes:
    """Pie's nucleus_sample container with its logits-shaped values declared for `vocab` tokens."""
    hexed = re.search(r"^container: ([0-9a-f]+)$", GOLDEN.read_text(), re.M).group(1)
    c = ptir.decode(bytes.fromhex(hexed))
    for _, ops in c.stages:
        for op in ops:
            if op.fields.get("shape") == (1, 8):
                op.fields["shape"] = (1, vocab)
    return ptir.encode(c)


async def main(prompt: str, max_tokens: int, top_p: float, seed: int = 1234, model=None) -> list:
    model = model or piegpu.load_model()
    pipe = model.pipeline()
    ws = model.working_set()
    ids = model.tokenizer.encode(prompt).ids
    if len(ids) > 1:
        prefill = ForwardPass()
        prefill.embed(Channel.from_(ids[:-1], dtype.i32), Channel.from_([0, len(ids) - 1], dtype.u32))
        prefill.state([ws], StateGeometry.folding())
        await pipe.submit(prefill)

    token_in = Channel([1], dtype.i32)
    state = Channel([2], dtype.u32)                 # Pie's chan0: [key, counter], one cell per pass
    top_p_ch = Channel([], dtype.f32)               # Pie's chan1: read every pass, never consumed
    token_out = Channel([1], dtype.i32)             # Pie's chan2: the sampled token
    top_p_ch.put(np.float32(top_p))

    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_([0, 1], dtype.u32))
    fwd.state([ws], StateGeometry.folding())
    fwd.epilogue_program(nucleus_container(model.config.vocab_size),
                         channels={"chan0": state, "chan1": top_p_ch, "chan2": token_out})

    out, token = [], ids[-1]
    for step in range(max_tokens):
        token_in.put(np.array([token], np.int32))
        state.put(np.array([seed, step], np.uint32))
        await pipe.submit(fwd)
        token = await token_out.take_scalar()
        out.append(token)
        print(model.tokenizer.decode([token]), end="", flush=True)
        if token in set(model.config.eos_token_ids):
            break
    print()
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0] if args else "Once upon a time", int(args[1]) if len(args) > 1 else 24,
                     float(args[2]) if len(args) > 2 else 0.9))
