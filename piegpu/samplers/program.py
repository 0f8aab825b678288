"""A sampler written as an eta container (Python, JS or Rust tracer): generate(sampler=program).

The container has the signature (logits f32[vocab], state u32[2]) -> i32 token with state
[seed, counter], counter + 1 per token (the sampler chains' RNG convention), so it draws
exactly what the same function traced in Python draws.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import dtype
from ..errors import ValidationError
from ..runtime.channel import Channel
from ..runtime.forward import inline_program
from .chain import rng_advance
from .state import SeqContext


def as_sampler_program(prog, where: str):
    """An eta Program from a Program, eta container bytes, or a sampler-shaped PTIR container (Pie's format)."""
    from ..ptir import as_sampler, is_ptir
    from ..runtime.forward import as_program
    return as_sampler(bytes(prog)) if is_ptir(prog) else as_program(prog, where)


def is_sampler_program(sampler) -> bool:
    """Whether generate(sampler=...) got an eta container (a Program or its bytes) rather than a sampler spec."""
    from ..eta.program import Program
    return isinstance(sampler, (Program, bytes, bytearray))


class ProgramSampler:
    """A sampler container (logits f32[vocab], state u32[2]) -> token as generate()'s sampler.

    The state is [seed, counter], counter + 1 per token (the sampler chains' RNG convention), so a
    container draws exactly what the same function traced in Python draws. Equal bytes from any
    tracer are one sampler: one decode loop per session, one cached kernel.
    """

    def __init__(self, prog, vocab: int, temperature=1.0, value=None, options=None, watermark=None):
        if temperature != 1.0 or value is not None or options or watermark is not None:
            raise ValidationError("generate(sampler=program): the program is the whole sampler, so temperature, "
                                  "sampler parameters and watermark do not apply. Fix: trace them into the program "
                                  "(e.g. logits * (1 / T)) and drop the options")
        self.program = prog = as_sampler_program(prog, "generate(sampler=program)")
        want = [f"f32[{vocab}]", "u32[2]"]
        got = [f"{t.dtype.name}{list(t.shape)}".replace(" ", "") for t in prog.input_types]
        outs = prog.output_types
        if got != want or len(outs) != 1 or outs[0].dtype.name not in ("i32", "u32") or outs[0].size != 1:
            raise ValidationError(f"generate(sampler=program): a sampler program has the signature (logits f32[{vocab}], "
                                  f"state u32[2]) -> i32 token; this one takes {got} and returns "
                                  f"{[repr(t) for t in outs]}. Fix: trace fn(logits, state) with spec([{vocab}], "
                                  "f32) and spec([2], u32), returning one token (e.g. gumbel_max(logits, state))")
        if prog.channels or any(n.op == "intrinsic" for n in prog.nodes):
            raise ValidationError(f"generate(sampler=program): the program uses channels {list(prog.channel_names)} "
                                  "or intrinsics; a sampler only sees its two inputs. Fix: run it as an epilogue with "
                                  "fwd.epilogue_program(prog, channels={...})")

    @property
    def name(self) -> str:
        """"program <hash prefix>"."""
        return f"program {self.program.hash[:12]}"

    def __eq__(self, other) -> bool:
        return isinstance(other, ProgramSampler) and other.program == self.program

    def __hash__(self) -> int:
        return hash(self.program)


class ProgramStates:
    """The RNG state channel of a ProgramSampler's decode loop: seeded per run, advanced on the device."""

    def __init__(self, sampler: ProgramSampler):
        self.sampler = sampler
        self.rng = Channel([2], dtype.u32).named("sampler:rng")

    def seed(self, ctx: SeqContext, sampler=None) -> None:
        """Host: state [seed, 0] for a new run (no pass in flight)."""
        self.rng.clear()
        self.rng.put(np.array([ctx.seed & 0xFFFFFFFF, 0], np.uint32))

    def step(self, logits):
        """Traced: the program's token for `logits`; the counter advances for the next pass."""
        state = self.rng.take()
        (token,) = inline_program(self.sampler.program, (logits, state))
        self.rng.put(rng_advance(state))
        return token

