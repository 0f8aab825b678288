"""Canonical program bytes: round trips, and every kind of corruption is rejected clearly."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from piegpu import ValidationError, dtype, eta
from piegpu.eta.program import MAGIC
from tests.eta.test_trace import SPECS, top_a
from tests.progen import random_program


@pytest.fixture(scope="module")
def prog():
    return eta.trace(top_a, *SPECS)


def test_round_trip(prog):
    again = eta.Program.from_bytes(prog.to_bytes())
    assert again == prog and again.hash == prog.hash and again.to_bytes() == prog.to_bytes()


@pytest.mark.parametrize("seed", range(40))
def test_round_trip_random_programs(seed):
    p, _, _ = random_program(seed)
    assert eta.Program.from_bytes(p.to_bytes()).to_bytes() == p.to_bytes()


def test_every_truncation_is_rejected(prog):
    data = prog.to_bytes()
    for n in range(len(data)):
        with pytest.raises(ValidationError):
            eta.Program.from_bytes(data[:n])


def test_trailing_bytes_rejected(prog):
    with pytest.raises(ValidationError, match="trailing"):
        eta.Program.from_bytes(prog.to_bytes() + b"\0")


def test_wrong_magic_and_version(prog):
    data = prog.to_bytes()
    with pytest.raises(ValidationError, match="magic"):
        eta.Program.from_bytes(b"XXXXXX" + data[6:])
    with pytest.raises(ValidationError, match="version"):
        eta.Program.from_bytes(MAGIC + struct.pack("<H", 99) + data[8:])


def test_unknown_op_rejected():
    p = eta.trace(lambda x: eta.exp(x), eta.spec([2], dtype.f32))
    data = p.to_bytes().replace(b"\x03exp", b"\x03exq")
    with pytest.raises(ValidationError, match="unknown op 'exq'"):
        eta.Program.from_bytes(data)


def test_bit_flips_never_decode_to_a_different_program(prog):
    data = bytearray(prog.to_bytes())
    rng = np.random.default_rng(0)
    for _ in range(400):
        pos, bit = int(rng.integers(0, len(data))), int(rng.integers(0, 8))
        flipped = bytearray(data)
        flipped[pos] ^= 1 << bit
        try:
            q = eta.Program.from_bytes(bytes(flipped))
        except ValidationError:
            continue
        # A flip that still decodes must be a valid, canonical, self-consistent program.
        assert q.to_bytes() == bytes(flipped)


def test_huge_declared_sizes_rejected(prog):
    data = bytearray(prog.to_bytes())
    off = len(MAGIC) + 2 + 2  # after magic, version, channel count
    data[off: off + 4] = struct.pack("<I", 0xFFFFFFF0)
    with pytest.raises(ValidationError):
        eta.Program.from_bytes(bytes(data))


def test_type_inconsistency_rejected():
    p = eta.trace(lambda x: eta.exp(x), eta.spec([2], dtype.f32))
    data = p.to_bytes()
    # change the stored dtype code of the exp node (f32=1) to i32 (2)
    i = data.index(b"\x03exp") + 4
    bad = data[:i + 1] + bytes([2]) + data[i + 2:]
    with pytest.raises(ValidationError, match="stored type"):
        eta.Program.from_bytes(bad)


def test_not_bytes():
    with pytest.raises(ValidationError, match="needs bytes"):
        eta.Program.from_bytes("text")
