"""Plans of forward passes over several sequences, and moving one to other working sets.

A batched pass names its sequences only through a uniform (per sequence: tokens, first token,
the word offset of its page-table row; model/kernels.py Kernels._seqs): every other binding --
weights, scratch, the pool's pages and tables, the RoPE table -- is the same whichever working
sets take the rows. So when a row of a batch changes hands (a sequence leaves, another takes its
place), the plan stays: `reseat` rewrites the offsets in that uniform (queue.write_buffer, ordered
before the next submit) instead of building the plan again (~12 ms at B=16 on lavapipe: bind
groups, uniforms, the plan's dispatch list).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import ValidationError
from ..runtime.dispatch import Recorder
from .forward import forward_batch
from .kernels import Kernels

SEQ_WORDS = 4  # words a sequence in the uniform: (tokens, first token, table-row word offset, -)


class BatchPlan(NamedTuple):
    """A pass over several sequences: its logits buffer, dispatches, its sequences' uniforms (values ->
    buffer) and the positions its RoPE table covers (the most any of its working sets may hold)."""

    logits: object
    plan: list
    seats: dict
    positions: int


def build(gpu, seqs: list, tokens, readout: list, hidden: bool = False) -> BatchPlan:
    """The plan of one pass over `seqs` = [(working set, first token, tokens)] (see GpuModel.batch_plan)."""
    T = sum(n for _, _, n in seqs)
    rows = sum(r for _, r in readout)
    if T < 2:
        raise ValidationError("internal: a batched pass has at least two tokens")
    s = gpu.scratch(T, rows)  # a batched pass always takes the token-group (prefill) kernels
    rec = Recorder(gpu.device, s.binds)
    k = Kernels(gpu, rec, T, scope=(T, rows))
    forward_batch(k, gpu, seqs, s, tokens, readout, hidden)
    k.advance_seqs(seqs)  # one dispatch for every sequence's length
    return BatchPlan(s.logits, rec.plan, dict(k.seats), max(ws.max_tokens for ws, _, _ in seqs))


def reseat(device, bp: BatchPlan, wss: list) -> BatchPlan | None:
    """`bp` with its sequences, in pass order, moved to the working sets `wss` (as many). None when one of them
    may hold more positions than the plan's RoPE table covers (build the plan again)."""
    if any(ws.max_tokens > bp.positions for ws in wss):
        return None
    seats = {}
    for values, buf in bp.seats.items():  # (one: every kernel of the plan names all its sequences, in order)
        words = np.array(values, np.uint32).reshape(-1, SEQ_WORDS)
        if len(words) != len(wss):
            raise ValidationError(f"internal: a plan over {len(words)} sequences cannot take {len(wss)} working sets")
        words[:, 2] = [ws.state[1] // 4 for ws in wss]
        device.queue.write_buffer(buf, 0, words.tobytes())
        seats[tuple(int(v) for v in words.reshape(-1))] = buf
    return bp._replace(seats=seats)
