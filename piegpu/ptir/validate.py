"""Pie's PTIR validation (compiler/ir validate.rs, infer.rs): the same checks, in the same order, same verdicts.

`bind(container, profile)` returns every stage's value types and the channel readiness
table, or raises PtirRejected carrying Pie's verdict text (`Body { stage: Epilogue, err:
BodyError { op_index: 1, kind: DTypeMismatch } }`, `IntrinsicUnavailable { intr:
MtpLogits }`, ...) so a golden file's `verdict:` line compares as a string.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .rejected import PtirRejected, camel
from .infer import body_types, channel_types
from .wire import PORTS, STAGES, Container

SINKS = {"attn_page_mask": "attention", "lora": "pass_wide", "minference_sparse": "pass_wide"}  # Pie's KNOWN_SINKS
INTRINSIC_STAGES = {"logits": ("epilogue",), "mtp_logits": ("epilogue",), "hidden": ("epilogue",),
                    "value_head": ("epilogue",), "mtp_drafts": ("epilogue",), "attn_score": ("on_attn",),
                    "query": ("on_attn_proj", "on_attn"), "layer": ("on_attn_proj", "on_attn")}
DECLARED = {"logits": "f32 [rows, vocab]", "mtp_logits": "f32 [rows, vocab]", "hidden": "f32 [rows, hidden_size]",
            "value_head": "f32 [n]", "query": "f32 of rank >= 1", "layer": "a u32 scalar", "mtp_drafts": "i32 [n]",
            "attn_score": "f32 [n]"}  # Pie's type rule of each intrinsic, for the fix of an IntrinsicTypeRule verdict


@dataclass
class Profile:
    """What a backend offers a program (Pie's ModelProfile): vocab, gated intrinsics, second-party kernels."""

    vocab: int
    intrinsics: frozenset = frozenset({"logits", "hidden", "query", "layer"})
    kernels: dict = field(default_factory=dict)  # name -> (sink scope or None, replayable)
    attn_page_mask: bool = False
    missing_reason: str = "not provided by piegpu's forward pass"


# Second-party kernels that Pie's registry and golden profiles name, with Pie's kind and replayability.
# piegpu implements none of them; a non-replayable one is rejected by the contract on every backend.
PIE_KERNELS = {"envelope_dot": (None, True), "gpu_load": (None, False)}


def piegpu_profile(vocab: int) -> Profile:
    """The profile of piegpu's forward pass: the logits and final hidden state of the readout rows; no MTP, value
    head, attention taps or kernels."""
    return Profile(vocab, frozenset({"logits", "hidden"}))


def _structure(c: Container) -> None:
    if any(a >= b for a, b in zip(c.names, c.names[1:])):
        raise PtirRejected("NamesUnsortedOrDuplicate", "the name table is not strictly sorted", "sort the names")
    tags = [STAGES.index(s) for s, _ in c.stages]
    for a, b in zip(tags, tags[1:]):
        if a >= b:
            v = f"DuplicateStage({camel(STAGES[a])})" if a == b else "StagesUnsorted"
            raise PtirRejected(v, "stage programs must be unique and sorted by stage", "one program per stage")
    ports = [PORTS.index(p.port) for p in c.ports]
    for a, b in zip(ports, ports[1:]):
        if a >= b:
            raise PtirRejected(f"DuplicatePort({camel(PORTS[a])})" if a == b else "PortsUnsorted",
                               "port bindings must be unique and sorted", "bind each port once, in tag order")
    for i, ch in enumerate(c.channels):
        if ch.capacity == 0:
            raise PtirRejected(f"ZeroCapacity {{ chan: {i} }}", f"channel {i} has capacity 0", "capacity >= 1")
    for p in c.ports:
        if p.channel is not None and p.channel >= len(c.channels):
            raise PtirRejected(f"PortChannelOutOfRange {{ port: {camel(p.port)}, chan: {p.channel} }}",
                               f"port {p.port} names channel {p.channel}", "bind a declared channel")
    for e_name, _, chan in c.externs:
        ch = c.channels[chan] if chan < len(c.channels) else None
        if ch is None or ch.host_role != "none" or ch.seeded:
            raise PtirRejected(f"ExternDeclConflict {{ chan: {chan} }}", f"extern channel {chan} is host-held or "
                               "seeded", "an extern channel is host_role none and unseeded")
        if e_name >= len(c.names):
            raise PtirRejected(f"ExternNameOutOfRange {{ chan: {chan} }}", "extern name index out of range",
                               "add the pairing name to the name table")
    if [x[2] for x in c.externs] != sorted({x[2] for x in c.externs}):
        raise PtirRejected("ExternsUnsortedOrDup", "the extern table is not sorted by channel", "sort it")


def _intrinsics(c: Container, profile: Profile) -> None:
    for stage, ops in c.stages:
        for op in ops:
            if op.name != "intrinsic_val":
                continue
            intr, (dt, shape) = op.fields["intrinsic"], (op.fields["dtype"], op.fields["shape"])
            if stage not in INTRINSIC_STAGES[intr]:
                raise PtirRejected(f"IntrinsicWrongStage {{ intr: {camel(intr)}, stage: {camel(stage)} }}",
                                   f"intrinsic {intr} is not in scope at stage {stage}",
                                   f"read {intr} in stage {' or '.join(INTRINSIC_STAGES[intr])}")
            if intr not in profile.intrinsics:
                raise PtirRejected(f"IntrinsicUnavailable {{ intr: {camel(intr)} }}",
                                   f"pass input {intr!r} is {profile.missing_reason}",
                                   f"drop the {intr} read, or run the container on Pie's engine")
            ok = {"logits": dt == "f32" and len(shape) == 2 and shape[1] == profile.vocab,
                  "mtp_logits": dt == "f32" and len(shape) == 2 and shape[1] == profile.vocab,
                  "hidden": dt == "f32" and len(shape) == 2, "value_head": dt == "f32" and len(shape) == 1,
                  "query": dt == "f32" and len(shape) >= 1, "layer": dt == "u32" and not shape,
                  "mtp_drafts": dt == "i32" and len(shape) == 1, "attn_score": dt == "f32" and len(shape) == 1}
            if not ok[intr]:
                raise PtirRejected(f"IntrinsicTypeRule {{ intr: {camel(intr)}, stage: {camel(stage)} }}",
                                   f"intrinsic {intr} declared {dt}{list(shape)} (vocab {profile.vocab})",
                                   f"declare {intr} as {DECLARED[intr]}")


def _second_party(c: Container, profile: Profile) -> None:
    for stage, ops in c.stages:
        for op in ops:
            if op.name not in ("kernel_call", "sink_call"):
                continue
            idx = op.fields["name"]
            name = c.names[idx] if idx < len(c.names) else ""
            tail = f"name_index: {idx}, name: \"{name}\""
            known = profile.kernels.get(name) or PIE_KERNELS.get(name)
            unavailable = PtirRejected(f"KernelUnavailable {{ {tail} }}", f"second-party {name!r} is "
                                       f"{profile.missing_reason}", "run the container on a Pie engine that has it")
            if op.name == "kernel_call":
                if known is None:
                    raise unavailable
                if known[0] is not None:
                    raise PtirRejected(f"SinkKernelKindMismatch {{ {tail} }}", f"{name!r} is a sink, called as a "
                                       "kernel", "call it with sink_call")
                if not known[1]:
                    raise PtirRejected(f"NotReplayable {{ {tail} }}", f"{name!r} returns time- or load-varying "
                                       "values (a register read in disguise)", "use a replayable kernel")
                if name not in profile.kernels:
                    raise unavailable
                continue
            if name == "attn_page_mask" and not profile.attn_page_mask:
                raise unavailable
            scope = SINKS.get(name) or (known[0] if known else None)
            if scope is None:
                raise unavailable if known is None else PtirRejected(
                    f"SinkKernelKindMismatch {{ {tail} }}", f"{name!r} is a kernel, called as a sink", "kernel_call")
            allowed = ("prologue",) if scope == "pass_wide" else ("prologue", "on_attn_proj")
            if stage not in allowed:
                raise PtirRejected(f"SinkMisplaced {{ {tail}, stage: {camel(stage)} }}", f"sink {name!r} at stage "
                                   f"{stage} does not precede its consumption point", f"call it in {allowed[-1]}")
            if name not in SINKS and name not in profile.kernels:
                raise unavailable


def _spsc(c: Container) -> None:
    dirs = {chan: d for _, d, chan in c.externs}
    for stage, ops in c.stages:
        for op in ops:
            if op.name not in ("chan_take", "chan_read", "chan_put"):
                continue
            chan, put = op.fields["chan"], op.name == "chan_put"
            if c.channels[chan].host_role == ("writer" if put else "reader"):
                v = "SecondProducer" if put else "SecondConsumer"
                raise PtirRejected(f"{v} {{ chan: {chan}, stage: {camel(stage)} }}",
                                   f"channel {chan}: the host is its {'writer' if put else 'reader'} and stage "
                                   f"{stage} {'puts' if put else 'consumes'} too (single producer, single consumer)",
                                   "give the channel one producer and one consumer")
            if dirs.get(chan) == ("import" if put else "export"):
                raise PtirRejected(f"ExternDirViolation {{ chan: {chan}, stage: {camel(stage)} }}",
                                   "the op violates the extern direction", "import consumes, export produces")
    for p in c.ports:
        if p.channel is not None and (dirs.get(p.channel) == "export" or c.channels[p.channel].host_role == "reader"):
            v = "ExternDirViolation" if dirs.get(p.channel) == "export" else "SecondConsumer"
            raise PtirRejected(f"{v} {{ chan: {p.channel}, stage: Prologue }}", f"port {p.port} consumes channel "
                               f"{p.channel}, which another endpoint consumes", "bind the port to another channel")


def readiness(c: Container) -> list:
    """Pie's readiness table: (channel, phase tag, "NeedsFull" | "NeedsEmpty"), first use per channel, phase order."""
    seen, out = set(), []
    phases = [("prologue", 0)] + [("descriptor", 0xFF)] + [(s, STAGES.index(s)) for s in STAGES[1:]]
    for phase, tag in phases:
        uses = ([(p.channel, "NeedsFull") for p in c.ports if p.channel is not None] if phase == "descriptor" else
                [(op.fields["chan"], "NeedsEmpty" if op.name == "chan_put" else "NeedsFull")
                 for op in (c.stage(phase) or []) if "chan" in op.fields])
        for chan, d in uses:
            if chan not in seen:
                seen.add(chan)
                out.append((chan, tag, d))
    return out


def bind(c: Container, profile: Profile) -> dict:
    """Validate as Pie's `bind` does; {stage: [value types]} on success, PtirRejected with Pie's verdict otherwise."""
    _structure(c)
    ctx = {"channels": channel_types(c), "names": len(c.names)}
    types = {stage: body_types(stage, ops, ctx) for stage, ops in c.stages}
    _intrinsics(c, profile)
    _second_party(c, profile)
    _spsc(c)
    return types


def not_provided(c: Container, profile: Profile) -> list:
    """Everything the container needs that `profile` lacks: pass inputs, second-party kernels, per-layer stages."""
    out = []
    for stage, ops in c.stages:
        if stage not in ("prologue", "epilogue"):
            out.append(f"stage {stage} (runs inside attention, per layer)")
        for op in ops:
            if op.name == "intrinsic_val" and op.fields["intrinsic"] not in profile.intrinsics:
                out.append(f"pass input {op.fields['intrinsic']!r}")
            elif op.name in ("kernel_call", "sink_call"):
                i = op.fields["name"]
                name = c.names[i] if i < len(c.names) else ""
                if name not in profile.kernels:
                    out.append(f"{op.name.split('_')[0]} {name!r}")
    return list(dict.fromkeys(out))
