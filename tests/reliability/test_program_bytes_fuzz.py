"""Malformed eta program bytes from random programs: truncation, bit flips, huge sizes, wrong magic/version.

Program.from_bytes must raise ValidationError -- never another exception, never hang or
allocate by a declared size -- or return a valid program whose canonical bytes are
exactly the input (so a corrupt program is never silently accepted as a different one).
"""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from piegpu import ValidationError, eta
from piegpu.errors import PieGpuError
from piegpu.eta.program import MAGIC, VERSION
from tests.progen import random_program
from tests.reliability.strategies import programs

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
HUGE = [0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFF, 1 << 20]


def decode_or_reject(data: bytes):
    """from_bytes(data): None if rejected with ValidationError; the program if it is canonical for data."""
    try:
        prog = eta.Program.from_bytes(data)
    except ValidationError:
        return None
    assert prog.to_bytes() == data, "decoded bytes that do not re-encode to themselves"
    return prog


def run_small(prog, seed: int) -> None:
    """Run a program decoded from mutated bytes on the interpreter: only PieGpuError may come out."""
    if prog.is_pure and max((n.type.size for n in prog.nodes if n.type is not None), default=0) <= 1 << 16:
        from tests.progen import random_input
        r = np.random.default_rng(seed)
        try:
            prog.run(*[random_input(r, t) for t in prog.input_types])
        except PieGpuError:
            pass


@SETTINGS
@given(case=programs(max_ops=10), seed=st.integers(0, 2**31))
def test_every_truncation_and_random_mutations(case, seed):
    data = case[0].to_bytes()
    for n in range(len(data)):
        assert decode_or_reject(data[:n]) is None, f"a {n}-byte prefix decoded"
    r = np.random.default_rng(seed)
    for _ in range(30):  # bit flips
        b = bytearray(data)
        for _ in range(int(r.integers(1, 3))):
            pos = int(r.integers(0, len(b)))
            b[pos] ^= 1 << int(r.integers(0, 8))
        prog = decode_or_reject(bytes(b))
        if prog is not None:
            run_small(prog, seed)
    for _ in range(20):  # huge values written over declared sizes, counts, indices, dims
        b = bytearray(data)
        pos = int(r.integers(0, max(1, len(b) - 3)))
        width = 2 if r.random() < 0.3 else 4
        value = int(r.choice(HUGE)) & ((1 << (8 * width)) - 1)
        b[pos:pos + width] = value.to_bytes(width, "little")[: len(b) - pos]
        prog = decode_or_reject(bytes(b))
        if prog is not None:
            run_small(prog, seed)


def test_header_corruptions_of_many_programs():
    for seed in range(60):
        data = random_program(seed)[0].to_bytes()
        assert decode_or_reject(b"PIEETB" + data[6:]) is None
        assert decode_or_reject(MAGIC + struct.pack("<H", VERSION + 1) + data[8:]) is None
        assert decode_or_reject(data + bytes([seed % 256])) is None
        for count_at in (len(MAGIC) + 2, len(MAGIC) + 4):  # channel count (u16), node count (u32)
            for v in HUGE:
                b = bytearray(data)
                w = 2 if count_at == len(MAGIC) + 2 else 4
                b[count_at:count_at + w] = (v & ((1 << 8 * w) - 1)).to_bytes(w, "little")
                if bytes(b) != data:
                    assert decode_or_reject(bytes(b)) is None
