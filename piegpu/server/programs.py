"""Sampler programs on the server: eta containers registered by hash, then named by requests (`sampler_program`).

`POST /v1/sampler-programs` takes a container (the raw bytes as application/octet-stream, or JSON
{"program": base64}) with the sampler signature (logits f32[vocab], state u32[2]) -> token, checks it
and answers {"id": its content hash}; a completion request with `"sampler_program": id` then runs it as
that request's whole sampler, per row of the batched pass (state [seed + choice, tokens drawn]).

Why this is safe to accept: an eta container is a pure dataflow graph of typed ops over static shapes
-- no loops, no recursion, no I/O, no host calls -- decoded and validated in full before use
(Program.from_bytes), and a sampler may not use channels or intrinsics, so it sees only its row's
logits and RNG state. What it can still do is cost: the limits below bound the graph's size and
every intermediate tensor, and the number of programs held (each compiles once, on first use, on
the engine thread). Registration is behind the server's API key like every /v1 route.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import OrderedDict

from fastapi import FastAPI, Request

from ..errors import PieGpuError
from ..eta.program import Program
from ..samplers.program import ProgramSampler
from .protocol import ServerError

MAX_NODES = 4096  # ops in one program
MAX_ELEMENTS_PER_VOCAB = 64  # the largest tensor a program may make: 64 x vocab elements (e.g. [64, vocab])
MAX_PROGRAMS = 64  # programs held; the least recently used goes first


class SamplerPrograms:
    """The registered sampler programs of one server, by content hash."""

    def __init__(self, vocab: int, capacity: int = MAX_PROGRAMS):
        self.vocab, self.capacity = vocab, capacity
        self.held: OrderedDict = OrderedDict()

    def add(self, data: bytes) -> Program:
        """Check and hold a container (400 naming what is wrong); returns the Program."""
        try:
            prog = Program.from_bytes(bytes(data))
            ProgramSampler(prog, self.vocab)  # the signature, no channels or intrinsics
        except PieGpuError as e:
            raise ServerError(400, f"the sampler program cannot be used: {e}", "program") from None
        if len(prog.nodes) > MAX_NODES:
            raise ServerError(400, f"the sampler program has {len(prog.nodes)} ops; the limit is {MAX_NODES}. Fix: "
                                   "a smaller program", "program")
        cap = MAX_ELEMENTS_PER_VOCAB * self.vocab
        big = max((n.type.size for n in prog.nodes), default=0)
        if big > cap:
            raise ServerError(400, f"the sampler program makes a tensor of {big} elements; the limit is {cap} "
                                   f"({MAX_ELEMENTS_PER_VOCAB} x the vocabulary). Fix: smaller intermediates",
                              "program")
        self.held[prog.hash] = prog
        self.held.move_to_end(prog.hash)
        while len(self.held) > self.capacity:
            self.held.popitem(last=False)
        return prog

    def get(self, pid: str) -> Program:
        """The program registered as `pid` (400 when there is none)."""
        prog = self.held.get(pid)
        if prog is None:
            raise ServerError(400, f"sampler_program {pid!r} is not registered on this server. Fix: POST the "
                                   "container to /v1/sampler-programs first and use the id it answers",
                              "sampler_program")
        self.held.move_to_end(pid)
        return prog


def _card(prog: Program) -> dict:
    return {"id": prog.hash, "object": "sampler_program", "bytes": len(prog.to_bytes()), "ops": len(prog.nodes)}


def register_programs(app: FastAPI, programs: SamplerPrograms) -> None:
    """Add the /v1/sampler-programs routes to `app`."""

    @app.post("/v1/sampler-programs")
    async def add_program(request: Request):
        """Register a sampler program (raw container bytes, or JSON {"program": base64})."""
        body = await request.body()
        if request.headers.get("content-type", "").startswith("application/json"):
            try:
                data = base64.b64decode(json.loads(body)["program"], validate=True)
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise ServerError(400, 'the body must be {"program": "<base64 of the container bytes>"} or the raw '
                                       "bytes as application/octet-stream", "program") from None
        else:
            data = body
        return _card(programs.add(data))

    @app.get("/v1/sampler-programs")
    async def list_programs():
        """The registered sampler programs."""
        return {"object": "list", "data": [_card(p) for p in programs.held.values()]}


__all__ = ["SamplerPrograms", "register_programs", "MAX_NODES", "MAX_PROGRAMS"]
