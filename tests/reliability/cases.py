"""The catalogue of bad inputs: each case triggers one error; the tests check it and docs/errors.md lists it.

    python -m tests.reliability.cases            # print the table
    python -m tests.reliability.cases --write    # regenerate docs/errors.md

A case names what it feeds piegpu, the error class it must raise and the words the
message must contain to say *where* (the op, file, tensor or channel). Every message must
also say how to fix it (test_error_table.py checks both). Messages are scrubbed of
temporary paths and machine details so the generated table is the same on every machine.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from piegpu import (ChannelError, ChannelFull, CompileError, DeviceError, ModelError, PieGpuError, TraceError,
                    ValidationError, dtype, eta)
from piegpu.runtime.session import run_sync

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "errors.md"
F32, I32, U32 = dtype.f32, dtype.i32, dtype.u32
# Words that tell the user what to do; every message needs one.
FIX_WORDS = re.compile(r"(?i)\bfix\b|\brestore\b|re-?download|re-?convert|re-?prepare|\breinstall\b|\binstall\b|"
                       r"\bcopy\b|\bcheck\b|\bremove\b|\brestart\b|\bunset\b")


@dataclass
class Case:
    """One bad input and the error it must produce."""

    area: str
    what: str
    run: Callable  # run(ctx) must raise
    error: type
    where: tuple = ()  # substrings the message must contain
    needs_gpu: bool = False
    scrub: tuple = ()  # extra (regex, replacement) for machine-dependent text
    warns: bool = False  # not an error: the run returns the warning text it printed
    gap: str = ""  # the message lacks a fix and must change in this file (which this helper may not edit)


@dataclass
class Ctx:
    """What cases need, created on first use: a temp dir, a tiny model on the GPU, tiny model files."""

    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="piegpu-cases-")))
    _tiny: object = None
    _files: Path | None = None
    _gguf: Path | None = None

    @property
    def tiny(self):
        """A tiny random model (NullTokenizer: a prompt is space-separated ids)."""
        if self._tiny is None:
            from tests.helpers import tiny_config, tiny_model
            self._tiny = tiny_model(tiny_config(layers=1, vocab=64, max_pos=64), seed=2)[0]
        return self._tiny

    @property
    def gguf(self) -> Path:
        """A tiny llama GGUF with a byte-level tokenizer."""
        if self._gguf is None:
            from tests.model.modeltest_helpers import gguf_tiny_config, random_weights, write_tiny_gguf
            cfg = gguf_tiny_config()
            self._gguf = write_tiny_gguf(self.tmp / "tiny.gguf", cfg, random_weights(cfg), "Q8_0")
        return self._gguf

    def model_dir(self, name: str) -> Path:
        """A fresh copy of a tiny HF-layout checkpoint (config.json, model.safetensors, tokenizer.json)."""
        if self._files is None:
            from piegpu.model.gguf_convert import convert_gguf
            self._files = convert_gguf(self.gguf, self.tmp / "tiny-model", quiet=True)
            (self._files / "manifest.json").unlink()  # a user checkpoint: the parsers, not the manifest, check
        d = self.tmp / name
        shutil.copytree(self._files, d)
        return d

    def close(self) -> None:
        """Remove the temp dir."""
        shutil.rmtree(self.tmp, ignore_errors=True)


run = run_sync  # a coroutine run on a fresh event loop


def trace(fn, *specs, **kw):
    """eta.trace with specs given as (shape, dtype) pairs."""
    return eta.trace(fn, *[eta.spec(s, d) for s, d in specs], **kw)


# ---- trace-time misuse (API.md section 2) ---------------------------------------------------------

def _trace_cases() -> list:
    v3 = ([3], F32)
    t = [
        ("`bool(t)` on a traced tensor", lambda c: trace(lambda x: bool(x), v3), TraceError, ("bool()", "select")),
        ("`int(t)`", lambda c: trace(lambda x: int(x), v3), TraceError, ("int()",)),
        ("`float(t)`", lambda c: trace(lambda x: float(x), v3), TraceError, ("float()",)),
        ("`len(t)`", lambda c: trace(lambda x: len(x), v3), TraceError, ("len()",)),
        ("iterating a traced tensor", lambda c: trace(lambda x: [v for v in x], v3), TraceError, ("iteration",)),
        ("`if t > 0:` (Python branch on a value)", lambda c: trace(lambda x: x if x > 0 else -x, v3), TraceError,
         ("bool()", "select")),
        ("`t == 1`", lambda c: trace(lambda x: x == 1, v3), TraceError, ("eta.eq",)),
        ("`t != 1`", lambda c: trace(lambda x: x != 1, v3), TraceError, ("eta.ne",)),
        ("`t[0]` indexing", lambda c: trace(lambda x: x[0], v3), TraceError, ("gather",)),
        ("an eta op outside any trace", lambda c: eta.iota(4), TraceError, ("eta.trace",)),
        ("a tensor of one trace used in another", _cross_trace, TraceError, ("another trace",)),
        ("a numpy array mixed into a trace", lambda c: trace(lambda x: x + np.ones(3, np.float32), v3), TraceError,
         ("numpy",)),
        ("the function returns a string", lambda c: trace(lambda x: "x", v3), TraceError, ("returned str",)),
        ("no outputs and no channel puts", lambda c: trace(lambda x: None, v3), TraceError, ("no outputs",)),
        ("65 outputs", lambda c: trace(lambda x: tuple(x + float(i) for i in range(65)), v3), TraceError,
         ("65 outputs",)),
        ("`intrinsics.output` outside an epilogue", _intrinsic_outside, TraceError, ("ForwardPass epilogue",)),
        ("an argument that is not an `eta.spec`", lambda c: eta.trace(lambda x: x, [3]), ValidationError,
         ("argument 1",)),
        ("an f16 input spec", lambda c: eta.spec([3], dtype.f16), ValidationError, ("f16",)),
        ("`spec` with a numpy dtype", lambda c: eta.spec([3], np.float32), ValidationError, ("dtype",)),
        ("f32 + i32", lambda c: trace(lambda x, y: x + y, ([3], F32), ([3], I32)), ValidationError,
         ("add", "f32", "i32")),
        ("shapes [3] + [4]", lambda c: trace(lambda x, y: x + y, ([3], F32), ([4], F32)), ValidationError,
         ("cannot broadcast", "[3]", "[4]")),
        ("reshape to rank 5", lambda c: trace(lambda x: eta.reshape(x, [2, 2, 2, 2, 2]), ([32], F32)),
         ValidationError, ("reshape", "rank 5")),
        ("reshape to a different size", lambda c: trace(lambda x: eta.reshape(x, [5]), ([4], F32)),
         ValidationError, ("reshape",)),
        ("a zero dimension", lambda c: trace(lambda x: eta.reshape(x, [0]), ([2], F32)), ValidationError,
         ("reshape", "dimension 0")),
        ("a 2^31-element shape", lambda c: trace(lambda x: eta.broadcast(x, [1 << 16, 1 << 15]), ([1], F32)),
         ValidationError, ("broadcast", "elements")),
        ("`top_k(x, 9)` on 8 values", lambda c: trace(lambda x: eta.top_k(x, 9)[0], ([8], F32)), ValidationError,
         ("k=9",)),
        ("`top_k` with a float k", lambda c: trace(lambda x: eta.top_k(x, 2.0)[0], ([8], F32)), ValidationError,
         ("top_k", "static Python int")),
        ("`gather` with float indices", lambda c: trace(lambda x, i: eta.gather(x, i), ([8], F32), ([2], F32)),
         ValidationError, ("gather", "float")),
        ("`exp` of an i32 tensor", lambda c: trace(lambda x: eta.exp(x), ([2], I32)), ValidationError, ("exp",)),
        ("`reduce_sum` of a scalar", lambda c: trace(lambda x: eta.reduce_sum(x), ([], F32)), ValidationError,
         ("reduce_sum", "rank-0")),
        ("i32 tensor + 0.5", lambda c: trace(lambda x: x + 0.5, ([2], I32)), ValidationError, ("0.5", "i32")),
        ("a constant that does not fit 32 bits", lambda c: trace(lambda x: x + (1 << 40), ([2], I32)),
         ValidationError, ("32 bits",)),
        ("`matmul` of [2,3] @ [2,3]", lambda c: trace(lambda x: eta.matmul(x, x), ([2, 3], F32)), ValidationError,
         ("matmul",)),
        ("`rng` with a u32[3] state", lambda c: trace(lambda s: eta.rng(s, [4]), ([3], U32)), ValidationError,
         ("rng", "u32[2]")),
        ("`cast` to a numpy dtype", lambda c: trace(lambda x: eta.cast(x, np.int32), ([2], F32)), ValidationError,
         ("cast",)),
        ("`concat([])`", lambda c: trace(lambda x: eta.concat([]), ([2], F32)), ValidationError, ("concat",)),
        ("`transpose` of a rank-3 tensor", lambda c: trace(lambda x: eta.transpose(x), ([2, 2, 2], F32)),
         ValidationError, ("transpose",)),
        ("`softmax` of i32 logits", lambda c: trace(lambda x: eta.softmax(x), ([4], I32)), ValidationError,
         ("softmax", "f32")),
        ("`select` with an f32 condition", lambda c: trace(lambda x: eta.select(x, x, x), ([2], F32)),
         ValidationError, ("select",)),
    ]
    return [Case("trace", w, f, e, wh) for w, f, e, wh in t]


def _cross_trace(c):
    saved = []
    trace(lambda x: saved.append(x) or x, ([2], F32))
    trace(lambda y: y + saved[0], ([2], F32))


def _intrinsic_outside(c):
    from piegpu.eta import intrinsics
    eta.trace(lambda: intrinsics.output(0, "logits"))


# ---- running programs ---------------------------------------------------------------------------

def _run_cases() -> list:
    p = lambda: trace(lambda x: x * 2.0, ([3], F32))  # noqa: E731
    return [
        Case("run", "`Program.run` with 2 inputs for 1", lambda c: p().run(np.ones(3, np.float32), np.ones(3)),
             ValidationError, ("takes 1 inputs",)),
        Case("run", "an input of the wrong shape", lambda c: p().run(np.ones(4, np.float32)), ValidationError,
             ("input 0", "[4]")),
        Case("run", "float values for an i32 input",
             lambda c: trace(lambda x: x + 1, ([2], I32)).run(np.array([1.5, 2.0])), ValidationError,
             ("input 0", "float")),
        Case("run", "an unknown backend", lambda c: p().run(np.ones(3, np.float32), backend="cuda"), ValidationError,
             ("backend 'cuda'",)),
        Case("run", "an unknown emit target", lambda c: p().emit("ptx"), ValidationError, ("target 'ptx'",)),
        Case("run", "a channel program run on wgsl", _impure_on_wgsl, ValidationError, ("channels",),
             needs_gpu=True),
        Case("run", "a program over the device's 128 MiB binding limit", _too_big, CompileError,
             ("binding limit", "largest value", "broadcast"), needs_gpu=True,
             scrub=((r"\d+ bytes of device memory, over the \d+-byte", "N bytes of device memory, over the M-byte"),)),
    ]


def _impure_on_wgsl(c):
    from piegpu import Channel
    ch = Channel([1], F32)
    trace(lambda x: ch.put(x), ([1], F32)).run(np.ones(1, np.float32), backend="wgsl")


def _too_big(c):
    trace(lambda x: eta.sort_desc(eta.broadcast(x, [1 << 17, 300]))[1], ([300], F32)).run(
        np.ones(300, np.float32), backend="wgsl")


# ---- program bytes ---------------------------------------------------------------------------------

def _bytes():
    return trace(lambda x, s: eta.gumbel_max(x, s), ([8], F32), ([2], U32)).to_bytes()


def _bytes_cases() -> list:
    from piegpu.eta.program import MAGIC
    off = len(MAGIC) + 4  # after magic, version and the channel count: the node count

    def patched(b: bytes, at: int, new: bytes) -> bytes:
        return b[:at] + new + b[at + len(new):]
    t = [
        ("truncated bytes", lambda c: eta.Program.from_bytes(_bytes()[:-3]), ("truncated",)),
        ("empty bytes", lambda c: eta.Program.from_bytes(b""), ("magic",)),
        ("a wrong magic", lambda c: eta.Program.from_bytes(b"XXXXXX" + _bytes()[6:]), ("magic",)),
        ("version 99", lambda c: eta.Program.from_bytes(MAGIC + struct.pack("<H", 99) + _bytes()[8:]),
         ("version 99",)),
        ("a trailing byte", lambda c: eta.Program.from_bytes(_bytes() + b"\0"), ("trailing",)),
        ("an unknown op name", _unknown_op, ("unknown op 'exq'",)),
        ("a node count of 2^32-16", lambda c: eta.Program.from_bytes(patched(_bytes(), off, struct.pack("<I", 0xFFFFFFF0))),
         ("declared",)),
        ("a stored type that contradicts the op", _bad_type, ("stored type",)),
    ]
    return [Case("program bytes", w, f, ValidationError, wh) for w, f, wh in t] + [
        Case("program bytes", "a str instead of bytes", lambda c: eta.Program.from_bytes("PIEETA"), ValidationError,
             ("needs bytes",), gap="piegpu/eta/program.py")]


def _unknown_op(c):
    data = trace(lambda x: eta.exp(x), ([2], F32)).to_bytes()
    eta.Program.from_bytes(data.replace(b"\x03exp", b"\x03exq"))


def _bad_type(c):
    data = trace(lambda x: eta.exp(x), ([2], F32)).to_bytes()
    i = data.index(b"\x03exp") + 4
    eta.Program.from_bytes(data[:i + 1] + bytes([2]) + data[i + 2:])


# ---- channels, passes, pipeline --------------------------------------------------------------------

def _channel_cases() -> list:
    from piegpu import Channel

    def full(c):
        ch = Channel([1], I32).capacity(1).named("replies")
        ch.put([1])
        ch.put([2])

    def empty_take(c):
        run(Channel([1], I32).named("answers").take())

    def poisoned(c):
        ch = Channel.from_([1], I32).named("victim")
        ch.poison(RuntimeError("the pass failed"))
        run(ch.take())

    t = [
        ("host put into a full channel", full, ChannelFull, ("'replies'", "full (1/1")),
        ("host put of shape [3] into [2] cells", lambda c: Channel([2], I32).named("pairs").put([1, 2, 3]),
         ValidationError, ("'pairs'", "[3]", "[2]")),
        ("host put of floats into an i32 channel", lambda c: Channel([2], I32).named("ids").put([1.5, 2.0]),
         ValidationError, ("'ids'", "float64")),
        ("host put of 2^40 into an i32 channel", lambda c: Channel([1], I32).named("ids").put([1 << 40]),
         ValidationError, ("'ids'", "do not fit")),
        ("host put of ints into a bool channel", lambda c: Channel([1], dtype.bool).named("mask").put([1]),
         ValidationError, ("'mask'", "bool")),
        ("a take no submitted pass can fill", empty_take, ChannelError, ("'answers'", "never complete")),
        ("`take_scalar` on [2] cells", lambda c: run(Channel.from_([1, 2], I32).named("pair").take_scalar()),
         ChannelError, ("'pair'", "take_scalar")),
        ("`capacity(0)`", lambda c: Channel([1], I32).named("q").capacity(0), ValidationError, ("'q'", "capacity")),
        ("an f16 channel", lambda c: Channel([1], dtype.f16), ValidationError, ("f16",)),
        ("a take from a poisoned channel", poisoned, ChannelError, ("'victim'", "the pass failed")),
        ("traced put of an f32 tensor into an i32 channel", _traced_put_dtype, ValidationError,
         ("'tokens'", "cast")),
        ("traced put of [4] into [3] cells", _traced_put_shape, ValidationError, ("'rows'", "[3]")),
    ]
    return [Case("channel", w, f, e, wh) for w, f, e, wh in t]


def _traced_put_dtype(c):
    from piegpu import Channel
    ch = Channel([1], I32).named("tokens")
    trace(lambda x: ch.put(x), ([1], F32))


def _traced_put_shape(c):
    from piegpu import Channel
    ch = Channel([3], F32).named("rows")
    trace(lambda x: ch.put(x), ([4], F32))


def _loop(c, ws, first=3, out_capacity=None):
    """The API.md greedy device loop on the tiny model."""
    from piegpu import Channel, ForwardPass, StateGeometry, channel_capacity
    from piegpu.eta import intrinsics
    token_in = Channel.from_([first], I32).named("token_in")
    token_out = Channel([1], I32).named("token_out").capacity(out_capacity or channel_capacity())
    fwd = ForwardPass()
    fwd.embed(token_in, Channel.from_([0, 1], U32))
    fwd.state([ws], StateGeometry.folding())

    @fwd.epilogue
    def _():
        t = eta.reshape(eta.reduce_argmax(intrinsics.output(0, "logits")), [1])
        token_in.put(t)
        token_out.put(t)
    return fwd, token_in, token_out


def prefilled_loop(pipe, model, ids: list) -> tuple:
    """A 128-position working set holding ids[:-1] (prefilled through `pipe`) and the device loop
    from ids[-1]: (ws, fwd, token_in, token_out)."""
    from tests.runtime.test_pipeline import prefill
    ws = model.working_set(128)
    prefill(pipe, ws, ids[:-1])
    return (ws, *_loop(None, ws, first=ids[-1]))


def _pipeline_cases() -> list:
    from piegpu import Channel, ForwardPass, StateGeometry

    def host_take_device_channel(c):
        m = c.tiny
        pipe = m.pipeline()
        fwd, token_in, _ = _loop(c, m.working_set(16))
        pipe.prepare(fwd)
        run(token_in.take())

    def never_taken(c):
        m = c.tiny
        fwd, _, _ = _loop(c, m.working_set(32), out_capacity=2)

        async def on_token():
            return True  # never takes token_out
        run(m.pipeline().run_ahead(fwd, 10, on_token))

    def empty_tokens(c):
        m = c.tiny
        fwd = ForwardPass()
        fwd.embed(Channel([1], I32).named("prompt"), Channel.from_([0, 1], U32))
        fwd.state([m.working_set(8)], StateGeometry.folding())
        run(m.pipeline().submit(fwd))

    def ws_full(c):
        m = c.tiny
        ws = m.working_set(2)
        fwd = ForwardPass()
        fwd.embed(Channel.from_([1, 2, 3], I32), Channel.from_([0, 3], U32))
        fwd.state([ws], StateGeometry.folding())
        run(m.pipeline().submit(fwd))

    def indptr(c):
        fwd = ForwardPass()
        fwd.embed(Channel.from_([1, 2], I32), Channel.from_([0, 3], U32))
        fwd.state([c.tiny.working_set(8)], StateGeometry.folding())
        run(c.tiny.pipeline().submit(fwd))

    def no_embed(c):
        run(c.tiny.pipeline().submit(ForwardPass()))

    def row1(c):
        fwd, _, _ = _loop(c, c.tiny.working_set(8))
        from piegpu.eta import intrinsics
        fwd.epilogue(lambda: eta.reduce_argmax(intrinsics.output(1, "logits")))
        c.tiny.pipeline().prepare(fwd)

    def compile_fail(c):
        fwd, _, token_out = _loop(c, c.tiny.working_set(8))
        from piegpu.eta import intrinsics

        def huge_sort():
            big = eta.broadcast(intrinsics.output(0, "logits"), [1 << 20, intrinsics.vocab()])
            token_out.put(eta.reshape(eta.reduce_sum(eta.reduce_sum(eta.sort_desc(big)[1])), [1]))
        fwd.epilogue(huge_sort)
        c.tiny.pipeline().prepare(fwd)

    t = [
        ("host take from a channel the device consumes", host_take_device_channel, ChannelError,
         ("'token_in'", "consumed on the device"), True),
        ("run_ahead whose on_token never takes the output", never_taken, ChannelError,
         ("'token_out'", "cannot submit pass 3"), True),
        ("submit with an empty tokens channel", empty_tokens, ChannelError, ("'prompt'", "holds 0 cells"), True),
        ("a pass beyond the working set's positions", ws_full, ValidationError, ("working set is full",), True),
        ("indptr [0, 3] for 2 tokens", indptr, ValidationError, ("indptr [0, 3]",), True),
        ("submit of a ForwardPass that embeds nothing", no_embed, ValidationError, ("embeds nothing",), True),
        ("`intrinsics.output(1)` with one readout row", row1, ValidationError, ("row 1 out of range",), True),
        ("an epilogue over the binding limit", compile_fail, CompileError, ("huge_sort", "binding limit"), True),
        ("`ForwardPass.embed` of lists", lambda c: ForwardPass().embed([1], [0, 1]), ValidationError,
         ("Channel",), False),
        ("`readout(0)`", lambda c: ForwardPass().readout(0), ValidationError, ("readout",), False),
        ("`keep(n)` in a folding pass", lambda c: StateGeometry.folding().keep(1), ValidationError,
         ("keep(n)", "accepting"), False),
    ]
    scrub = ((r"\d+ bytes of device memory, over the \d+-byte", "N bytes of device memory, over the M-byte"),)
    return [Case("pipeline", w, f, e, wh, needs_gpu=g, scrub=scrub) for w, f, e, wh, g in t]


# ---- generate ---------------------------------------------------------------------------------------

def _generate_cases() -> list:
    def gen(**kw):
        def f(c):
            args = {"prompt": "5 6", **kw}
            c.tiny.generate(args.pop("prompt"), **args).run()
        return f
    g, s = "piegpu/textgen/generation.py", "piegpu/samplers.py"
    t = [
        ("an empty prompt", gen(prompt=""), ("prompt is empty",), ""),
        ("a prompt longer than the context", gen(prompt=" ".join(["7"] * 80)), ("80 tokens", "room for 64"), ""),
        ("`max_tokens=0`", gen(max_tokens=0), ("max_tokens",), g),
        ("`max_tokens=-5`", gen(max_tokens=-5), ("max_tokens",), g),
        ("`max_tokens=True`", gen(max_tokens=True), ("max_tokens",), g),
        ("an unknown sampler name", gen(sampler="nucleus"), ("'nucleus'",), ""),
        ("`temperature=-1`", gen(sampler="top-k", temperature=-1.0), ("temperature",), s),
        ("`seed=-1`", gen(seed=-1), ("seed",), g),
        ("`top_p` with p = 0", gen(sampler="top-p", p=0.0), ("top_p", "p"), ""),
        ("a prompt that is not a str", gen(prompt=[1, 2]), ("prompt", "str"), g),
    ]
    return [Case("generate", w, f, ValidationError, wh, needs_gpu=True, gap=gap) for w, f, wh, gap in t]


# ---- model files ------------------------------------------------------------------------------------

def _load(c, d):
    from piegpu.textgen.model import load_model
    load_model(d, verbose=False)


def _mutate(name: str, fn):
    """A case body: copy the tiny checkpoint, apply fn(dir) to it, load it."""
    def body(c):
        d = c.model_dir(name)
        fn(d)
        _load(c, d)
    return body


def _rewrite(fname: str, fn):
    return lambda d: (d / fname).write_bytes(fn((d / fname).read_bytes()))


def _model_cases() -> list:
    import json
    st = "model.safetensors"

    def hlen_huge(b: bytes) -> bytes:
        return struct.pack("<Q", 1 << 40) + b[8:]

    def header_garbage(b: bytes) -> bytes:
        return b[:8] + b"{not json" + b[17:]

    def shape_lie(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg["intermediate_size"] += 32
        (d / "config.json").write_text(json.dumps(cfg))

    def missing_tensor(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg["num_hidden_layers"] += 1
        (d / "config.json").write_text(json.dumps(cfg))

    def bad_type(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg["hidden_size"] = "wide"
        (d / "config.json").write_text(json.dumps(cfg))

    def no_key(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        del cfg["vocab_size"]
        (d / "config.json").write_text(json.dumps(cfg))

    def gguf_case(fn):
        def body(c):
            from piegpu.textgen.model import load_model
            p = c.tmp / "bad.gguf"
            p.write_bytes(fn(c.gguf.read_bytes()))
            old = os.environ.get("PIEGPU_CACHE_DIR")
            os.environ["PIEGPU_CACHE_DIR"] = str(c.tmp / "cache")  # never touch the real prepared-model cache
            try:
                load_model(p, verbose=False)
            finally:
                if old is None:
                    del os.environ["PIEGPU_CACHE_DIR"]
                else:
                    os.environ["PIEGPU_CACHE_DIR"] = old
        return body

    def gguf_bad_string(b: bytes) -> bytes:
        i = b.index(b"tokenizer.chat_template")
        j = i + len(b"tokenizer.chat_template") + 4 + 8  # past the key, the value type and the string length
        return b[:j] + b"\xff\xfe" + b[j + 2:]

    def prepared_modified(c):
        from piegpu.model.gguf_convert import convert_gguf
        d = convert_gguf(c.gguf, c.tmp / "prepared", quiet=True)
        data = bytearray((d / "tokenizer.json").read_bytes())
        data[100] ^= 0x01
        (d / "tokenizer.json").write_bytes(bytes(data))
        from piegpu.model.checkpoint import load_checkpoint
        load_checkpoint(d)

    t = [
        ("a model path that does not exist", lambda c: _load(c, c.tmp / "nowhere"), ("nowhere",)),
        ("config.json missing", _mutate("m1", lambda d: (d / "config.json").unlink()), ("config.json", "not found")),
        ("config.json truncated", _mutate("m2", _rewrite("config.json", lambda b: b[: len(b) // 2])),
         ("config.json", "not valid JSON")),
        ("config.json not UTF-8", _mutate("m3", _rewrite("config.json", lambda b: b"\xff\xfe" + b[2:])),
         ("config.json", "UTF-8")),
        ("config.json without vocab_size", _mutate("m4", no_key), ("config.json", "'vocab_size'")),
        ("config.json with hidden_size \"wide\"", _mutate("m5", bad_type), ("config.json", "hidden_size")),
        ("config.json that disagrees with the weights", _mutate("m6", shape_lie),
         (st, "mlp.gate_proj.weight", "config.json")),
        ("config.json with more layers than the weights", _mutate("m7", missing_tensor),
         (st, "model.layers.2.")),
        ("model.safetensors truncated", _mutate("m8", _rewrite(st, lambda b: b[: len(b) * 2 // 3])),
         (st, "truncated")),
        ("model.safetensors with a 2^40-byte header length", _mutate("m9", _rewrite(st, hlen_huge)),
         (st, "corrupt safetensors header")),
        ("model.safetensors with a garbage header", _mutate("m10", _rewrite(st, header_garbage)),
         (st, "corrupt safetensors header")),
        ("model.safetensors missing", _mutate("m11", lambda d: (d / st).unlink()), ("no weights found",)),
        ("tokenizer.json truncated", _mutate("m12", _rewrite("tokenizer.json", lambda b: b[: len(b) // 2])),
         ("tokenizer.json", "cannot parse")),
        ("tokenizer.json missing", _mutate("m13", lambda d: (d / "tokenizer.json").unlink()),
         ("tokenizer.json", "not found")),
        ("tokenizer_config.json truncated", _mutate("m14", _rewrite("tokenizer_config.json", lambda b: b[:40])),
         ("tokenizer_config.json",)),
        ("a GGUF file truncated to a third", gguf_case(lambda b: b[: len(b) // 3]), ("bad.gguf", "not a readable GGUF")),
        ("a GGUF file with a wrong magic", gguf_case(lambda b: b"GGUX" + b[4:]), ("bad.gguf",)),
        ("a GGUF metadata string that is not UTF-8", gguf_case(gguf_bad_string),
         ("bad.gguf", "tokenizer.chat_template")),
        ("a prepared model whose tokenizer.json changed", prepared_modified, ("tokenizer.json", "sha256")),
    ]
    # The tokenizers library's own message is long and version-specific: keep its first clause.
    scrub = ((r"cannot parse tokenizer \((.{0,60})[^;]*\);", r"cannot parse tokenizer (\1...);"),
             (r"(not a readable GGUF file \([A-Za-z]+Error): [^;]*\);", r"\1: ...);"),
             # the local models an unknown name's error lists are this machine's
             (r"(Models on this machine \(`piegpu models`\)): .*?\. Fix:", r"\1: <the models here>. Fix:"))
    return [Case("model files", w, f, ModelError, wh, needs_gpu=True, scrub=scrub) for w, f, wh in t]


# ---- cache dir and device (subprocesses: fresh device, private environment) -------------------------

SUBPROCESS = textwrap.dedent("""
    import json, sys, numpy as np
    from piegpu import eta, dtype
    try:
        p = eta.trace(lambda x: x * 2.0, eta.spec([4], dtype.f32))
        out = p.run(np.arange(4, dtype=np.float32), backend="wgsl")
        print(json.dumps({"ok": out.tolist()}))
    except Exception as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
""")


def subprocess_run(env: dict, code: str = SUBPROCESS, timeout: float = 120) -> tuple:
    """(parsed last stdout line, stderr) of `code` in a fresh interpreter with `env` added."""
    import json
    full = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=ROOT,
                         timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError(f"subprocess printed no result (rc {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(lines[-1]), out.stderr


class Raised(Exception):
    """Carries an error a subprocess reported (class name and message) back into the case runner."""


def _device_case(env: dict):
    def body(c):
        res, _ = subprocess_run(env)
        if "error" in res:
            cls = {"DeviceError": DeviceError, "ValidationError": ValidationError}.get(res["error"])
            if cls is None:
                raise AssertionError(f"unexpected {res['error']}: {res['message']}")
            raise cls(res["message"])
        raise AssertionError(f"no error: {res}")
    return body


def _kernels_is_a_file(c):
    d = c.tmp / "ro-cache"
    d.mkdir()
    (d / "kernels").write_text("not a directory")
    res, err = subprocess_run({"PIEGPU_CACHE_DIR": str(d)})
    assert res == {"ok": [0.0, 2.0, 4.0, 6.0]}, res
    return next(ln for ln in err.splitlines() if "kernel cache" in ln)


def _device_lost(c):
    code = textwrap.dedent("""
        import json, asyncio
        from tests.helpers import tiny_config, tiny_model
        model, _ = tiny_model(tiny_config(layers=1, vocab=64), seed=1)
        ws = model.working_set(32)
        model.generate("1 2", max_tokens=2, working_set=ws).run()
        model.gpu.device.destroy()
        try:
            model.generate("3 4", max_tokens=2, working_set=ws).run()
            print(json.dumps({"ok": "no error"}))
        except Exception as e:
            print(json.dumps({"error": type(e).__name__, "message": str(e)}))
    """)
    res, _ = subprocess_run({}, code)
    if res.get("error") == "DeviceError":
        raise DeviceError(res["message"])
    raise AssertionError(f"expected DeviceError, got {res}")


def _env_cases() -> list:
    adapters = (r"\(adapters: .*?\)(?= \(set in|\. Fix)", "(adapters: <this machine's>)")
    return [
        Case("device", "`PIEGPU_ADAPTER=nonexistent`", _device_case({"PIEGPU_ADAPTER": "nonexistent"}), DeviceError,
             ("PIEGPU_ADAPTER='nonexistent'", "mesa-vulkan-drivers"), needs_gpu=True, scrub=(adapters,)),
        Case("device", "`VK_ICD_FILENAMES` pointing nowhere", _device_case({"VK_ICD_FILENAMES": "/nonexistent/icd.json"}),
             DeviceError, ("no GPU adapter", "VK_ICD_FILENAMES", "mesa-vulkan-drivers"), needs_gpu=True),
        Case("device", "`PIEGPU_BACKEND=glide`", _device_case({"PIEGPU_BACKEND": "glide"}), DeviceError,
             ("PIEGPU_BACKEND='glide'",), needs_gpu=True),
        Case("device", "the device is lost (`device.destroy()`) between two generations", _device_lost, DeviceError,
             ("device is lost", "restart"), needs_gpu=True,
             scrub=((r"\(Validation Error.*?\)\. Fix", "(<wgpu's message>). Fix"),)),
        Case("cache", "a regular file where `$PIEGPU_CACHE_DIR/kernels` should be", _kernels_is_a_file, PieGpuError,
             ("kernel cache", "memory only", "PIEGPU_CACHE_DIR"), needs_gpu=True, warns=True,
             scrub=((r"\(\[Errno \d+\] [^)]*\)", "(<OS error>)"),)),
    ]


def all_cases() -> list:
    """Every case, in table order."""
    return (_trace_cases() + _run_cases() + _bytes_cases() + _channel_cases() + _pipeline_cases()
            + _generate_cases() + _model_cases() + _env_cases())


# ---- running and the table -------------------------------------------------------------------------

def outcome(case: Case, ctx: Ctx) -> tuple:
    """(error class name, scrubbed message) the case produced; AssertionError if it raised nothing."""
    try:
        got = case.run(ctx)
    except BaseException as e:  # noqa: BLE001 -- the table records whatever came out
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return type(e).__name__, scrub(str(e), case, ctx), e
    if case.warns:
        return "(warning)", scrub(str(got), case, ctx), None
    raise AssertionError(f"{case.area}: {case.what}: no error raised")


def scrub(msg: str, case: Case, ctx: Ctx) -> str:
    """The message without temp paths and machine-specific details."""
    msg = msg.replace(str(ctx.tmp.resolve()), "<tmp>").replace(str(ctx.tmp), "<tmp>")
    msg = re.sub(r"/tmp/piegpu-[\w-]+", "<tmp>", msg)
    msg = re.sub(r"<tmp>/bad\.gguf", "bad.gguf", msg)
    for pat, rep in case.scrub:
        msg = re.sub(pat, rep, msg, flags=re.S)
    return " ".join(msg.split())


def table(rows: list) -> str:
    """docs/errors.md from (case, class name, message) rows."""
    out = ["# Bad inputs and the errors they produce", "",
           "Generated by `python -m tests.reliability.cases --write` from the cases in",
           "`tests/reliability/cases.py`; `tests/reliability/test_error_table.py` checks that every case",
           "raises the listed error with a message naming *where* and *how to fix it*, and that this",
           "file is up to date. Temporary paths and machine details are replaced by `<...>`.", ""]
    area = None
    for case, cls, msg in rows:
        if case.area != area:
            area = case.area
            out += ["", f"## {area}", "", "| bad input | error | message |", "|---|---|---|"]
        out.append(f"| {_cell(case.what)} | `{cls}` | {_cell(msg)} |")
    from tests.reliability.samplers_table import markdown as sampler_table
    out += ["", sampler_table()]
    return "\n".join(out).rstrip() + "\n"


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def generate(cases=None) -> tuple:
    """(markdown, rows) for `cases` (default: all)."""
    ctx = Ctx()
    try:
        rows = []
        for case in cases or all_cases():
            cls, msg, _ = outcome(case, ctx)
            rows.append((case, cls, msg))
        return table(rows), rows
    finally:
        ctx.close()


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="print or write docs/errors.md")
    ap.add_argument("--write", action="store_true", help=f"write {DOC.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    text, _ = generate()
    if args.write:
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text(text)
        print(f"wrote {DOC}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
