"""The device decode loop of API.md section 3 as a building block: a token picked on the device feeds the next pass.

generate(), JSON mode, benchmarks and tests build their loops with decode_loop(); what
differs between them is only how the token is picked from the logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import eta
from ..dtypes import dtype
from ..eta import intrinsics
from .channel import Channel
from .window import channel_capacity
from .forward import ForwardPass, StateGeometry


@dataclass
class DecodeLoop:
    """A one-token pass whose epilogue picks the next token: it feeds the next pass and goes to the host."""

    fwd: ForwardPass
    token_in: Channel  # the token each pass embeds (put by the previous pass on the device)
    token_out: Channel  # every picked token, for the host to take


def decode_loop(ws, pick: Callable, first: int | None = None, name: str = "") -> DecodeLoop:
    """The device loop over working set `ws`: each pass embeds token_in's cell and appends it to the KV state.

    `pick(logits)` is traced into the epilogue: it gets readout row 0's f32 [vocab] logits
    and returns the next token (an int tensor, scalar or [1]). `first`: the token the first
    pass embeds (else put it into token_in later). `name` prefixes the channel names.
    """
    token_in = Channel([1], dtype.i32).named(f"{name}token_in")
    if first is not None:
        token_in.put([first])
    token_out = Channel([1], dtype.i32).named(f"{name}token_out").capacity(channel_capacity())
    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_([0, 1], dtype.u32))
    fwd.state([ws], StateGeometry.folding())

    @fwd.epilogue
    def _():
        token = eta.reshape(eta.cast(pick(intrinsics.output(0, "logits")), dtype.i32), [1])
        token_in.put(token)
        token_out.put(token)

    return DecodeLoop(fwd, token_in, token_out)
