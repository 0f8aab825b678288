"""Container v2 (docs/container.md): channels declared by name and cell type, and the decoder's strictness."""

from __future__ import annotations

import struct

import pytest

from piegpu import Channel, ValidationError, dtype, eta
from piegpu.eta.program import MAGIC, VERSION, Node, Program
from piegpu.eta.ops import TType

I32 = dtype.i32


def _loop(a: Channel, b: Channel):
    def fn(x):
        a.put(b.take() + x)
    return eta.trace(fn, eta.spec([1], I32))


def test_channel_names_are_in_the_bytes_and_the_hash():
    named = _loop(Channel([1], I32).named("out"), Channel([1], I32).named("token_in"))
    assert named.channel_names == ("token_in", "out")  # slots in first-use order
    data = named.to_bytes()
    assert data[:8] == MAGIC + struct.pack("<H", VERSION) and VERSION == 2
    assert data[8:10] == struct.pack("<H", 2)
    assert data[10:12] == struct.pack("<H", 8) and data[12:20] == b"token_in"
    again = eta.Program.from_bytes(data)
    assert again.channel_names == ("token_in", "out") and again.to_bytes() == data
    renamed = _loop(Channel([1], I32).named("out2"), Channel([1], I32).named("token_in"))
    assert renamed.hash != named.hash


def test_unnamed_and_duplicate_names_are_deterministic():
    assert _loop(Channel([1], I32), Channel([1], I32)).channel_names == ("chan0", "chan1")
    assert _loop(Channel([1], I32).named("x"), Channel([1], I32).named("x")).channel_names == ("x", "x#1")
    assert _loop(Channel([1], I32), Channel([1], I32).named("chan1")).channel_names == ("chan1", "chan1#1")


def test_bad_names_are_rejected_when_tracing():
    with pytest.raises(ValidationError, match="1 to 255"):
        _loop(Channel([1], I32).named("x" * 256), Channel([1], I32))
    with pytest.raises(ValidationError, match="character"):
        _loop(Channel([1], I32).named("a\nb"), Channel([1], I32))


def _with_names(names) -> bytes:
    cell = TType(I32, (1,))
    nodes = [Node("chan_take", (), (0, 0, I32, (1,)), cell), Node("chan_put", (0,), (1, 0), None)]
    good = Program(nodes, (), (cell, cell), ("aa", "bb")).to_bytes()
    a, b = (n.encode() for n in names)
    return good.replace(b"\x02\x00aa", struct.pack("<H", len(a)) + a).replace(b"\x02\x00bb", struct.pack("<H", len(b)) + b)


def test_decoder_rejects_duplicate_empty_and_non_utf8_names():
    assert eta.Program.from_bytes(_with_names(["aa", "bb"])).channel_names == ("aa", "bb")
    with pytest.raises(ValidationError, match="unique"):
        eta.Program.from_bytes(_with_names(["aa", "aa"]))
    with pytest.raises(ValidationError, match="1 to 255"):
        eta.Program.from_bytes(_with_names(["", "bb"]))
    with pytest.raises(ValidationError, match="not UTF-8"):
        eta.Program.from_bytes(_with_names(["aa", "bb"]).replace(b"bb", b"\xff\xfe"))


def test_decoder_rejects_out_of_order_seqs_and_out_of_range_ints():
    cell = TType(I32, (1,))
    nodes = [Node("chan_take", (), (0, 1, I32, (1,)), cell)]
    with pytest.raises(ValidationError, match="seq 1"):
        eta.Program.from_bytes(Program(nodes, (0,), (cell,)).to_bytes())
    nodes = [Node("chan_take", (), (0, 0, I32, (1,)), cell), Node("chan_take", (), (0, 0, I32, (1,)), cell)]
    with pytest.raises(ValidationError, match="seq 0"):
        eta.Program.from_bytes(Program(nodes, (0, 1), (cell,)).to_bytes())
    data = eta.trace(lambda x: eta.slice_last(x, 1, 2), eta.spec([4], dtype.f32)).to_bytes()
    i = data.index(b"\x0aslice_last")
    at = data.index(struct.pack("<q", 1), i)
    with pytest.raises(ValidationError, match="outside 0..2\\^32-1"):
        eta.Program.from_bytes(data[:at] + struct.pack("<q", -1) + data[at + 8:])


def test_decoder_rejects_f16_and_version_1():
    data = eta.trace(lambda x: eta.exp(x), eta.spec([2], dtype.f32)).to_bytes()
    i = data.index(b"\x05input") + 6 + 1  # after the name and the type flag: the stored dtype code
    with pytest.raises(ValidationError, match="dtype code 5"):
        eta.Program.from_bytes(data[:i] + bytes([dtype.f16.code]) + data[i + 1:])
    with pytest.raises(ValidationError, match="version 1"):
        eta.Program.from_bytes(MAGIC + struct.pack("<H", 1) + data[8:])


def test_docs_container_md_lists_every_op_with_its_attributes_and_its_examples_hold():
    import re
    from pathlib import Path

    from piegpu.eta.ops import OPS
    text = (Path(__file__).resolve().parents[2] / "docs" / "container.md").read_text()
    section = text.split("## 3. The op table", 1)[1].split("## 4.", 1)[0]
    listed = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.split("|")[1:-1]]
        if len(cells) == 4 and cells[0].startswith("`"):
            for op in re.findall(r"`([a-z_]+)`", cells[0]):
                listed[op] = [t.split(":")[0] for t in re.findall(r"`([^`]+)`", cells[2])]
    assert set(listed) == set(OPS), sorted(set(OPS) ^ set(listed))
    for op, d in OPS.items():
        assert listed[op] == [a for a, _ in d.attrs], op
    assert "c3a8792db4a3a7afda7dc0ebf84f81c049783b0b940f6de68f0c455e99ba0051" in text
    assert eta.trace(lambda x: x * 2.0, eta.spec([4], dtype.f32)).hash in text
    assert len(eta.trace(lambda x: x * 2.0, eta.spec([4], dtype.f32)).to_bytes()) == 118
    ch = Channel([1], I32).named("token_out")
    prog = eta.trace(lambda x: ch.put(eta.reshape(eta.reduce_argmax(x), [1])), eta.spec([3], dtype.f32))
    assert prog.hash in text
