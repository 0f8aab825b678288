"""A sampler-shaped PTIR container as a piegpu sampler program: (logits f32[vocab], state u32[2]) -> token.

Sampler-shaped means: the program reads the logits, takes at most one u32[2] RNG state
channel ([key, counter], the convention piegpu's samplers advance per token), and puts
one i32/u32 token cell into the channel the host reads. Puts into device-only channels
(the token fed back to the embedding, the state put back) are the decode loop's job in
piegpu, so they are dropped; any other channel the program reads makes it not a sampler.
"""

from __future__ import annotations

from ..dtypes import dtype
from ..errors import ValidationError
from ..eta import api as F
from ..eta.program import Program
from ..eta.tracer import constant, current, spec, trace
from .translate import load, vocab_of


def _roles(prog: Program) -> tuple:
    c = prog.ptir_container
    state = [i for i, n in enumerate(prog.nodes) if n.op == "chan_take" and n.type.dtype == dtype.u32
             and n.type.shape == (2,)]
    outs = [n.attr["slot"] for n in prog.nodes if n.op == "chan_put" and c.channels[n.attr["slot"]].host_role
            == "reader"]
    if len(outs) != 1 or c.channels[outs[0]].dtype not in ("i32", "u32"):
        raise ValidationError(f"as_sampler: a sampler container puts one token into one host-read channel; this "
                              f"one puts into host-read channels {outs}. Fix: run it as an epilogue with "
                              "fwd.epilogue_program(bytes, channels={...})")
    return (prog.nodes[state[0]].attr["slot"] if state else None), outs[0]


def as_sampler(data: bytes, params: dict | None = None) -> Program:
    """The sampler program (logits f32[vocab], state u32[2]) -> token of a sampler-shaped PTIR container.

    `params` gives the value of each read-only parameter channel by name, e.g. {"chan1": 0.9}
    for nucleus_sample's top_p: it is folded into the program as a constant.
    """
    params = dict(params or {})
    prog = load(data)
    state_slot, out_slot = _roles(prog)
    vocab = vocab_of(prog.ptir_container)
    cell = prog.channels[out_slot]
    if cell.size != 1:
        raise ValidationError(f"as_sampler: the token channel chan{out_slot} holds {cell!r}, not one token. "
                              "Fix: put a [1] i32 token")

    def sampler(logits, state):
        vals, token = {}, None
        for i, n in enumerate(prog.nodes):
            slot = n.attr.get("slot")
            if n.op == "intrinsic":
                if n.attr["name"] != "logits":
                    raise ValidationError(f"as_sampler: the program reads {n.attr['name']!r}; a sampler sees only "
                                          "the logits. Fix: run it as an epilogue")
                vals[i] = F.reshape(logits, n.type.shape)
            elif n.op == "chan_read" and prog.channel_names[slot] in params:
                if n.type.size != 1:
                    raise ValidationError(f"as_sampler: params gives chan{slot}, which holds {n.type!r}; only "
                                          "one-value parameter channels fold. Fix: run it as an epilogue")
                value = constant(params.pop(prog.channel_names[slot]), n.type.dtype)
                vals[i] = F.broadcast(value, n.type.shape) if n.type.shape else value
            elif n.op in ("chan_take", "chan_read"):
                if slot != state_slot:
                    raise ValidationError(f"as_sampler: the program reads channel chan{slot} ({n.type!r}), whose "
                                          "values come from the host or a seed. Fix: run it as an epilogue with "
                                          f"fwd.epilogue_program(bytes, channels={{'chan{slot}': ch, ...}})")
                vals[i] = state
            elif n.op == "chan_put":
                token = vals[n.inputs[0]] if slot == out_slot else token
            else:
                vals[i] = current().add(n.op, [vals[j] for j in n.inputs], **n.attr)
        return F.reshape(token, (1,))

    out = trace(sampler, spec([vocab], dtype.f32), spec([2], dtype.u32))
    if params:
        raise ValidationError(f"as_sampler: params names {sorted(params)}, which the program does not read "
                              f"(it declares {list(prog.channel_names)}). Fix: drop them")
    return out
