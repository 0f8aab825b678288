"""The PTIR wire format: byte-identical round trips, and malformed bytes as clear errors (offset and field)."""

from __future__ import annotations

import random

import pytest

from piegpu import ValidationError
from piegpu.ptir import container_hash, decode, encode, load, to_ptir
from piegpu.ptir.wire import OPS, fnv1a64

from .conftest import CONTAINERS

RUNNABLE = [n for n in CONTAINERS if not n.startswith(("neg_", "mtp_", "pentathlon_"))]


def test_fnv1a64_is_pies_hash():
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8
    assert container_hash(CONTAINERS["greedy_argmax"]) == "0xb6c5a1e12fcc32fb"


@pytest.mark.parametrize("name", sorted(CONTAINERS))
def test_every_golden_container_round_trips_byte_identically(name):
    data = CONTAINERS[name]
    assert encode(decode(data)) == data
    if name in RUNNABLE:
        prog = load(data)
        assert prog.to_ptir() == data == to_ptir(prog)  # PTIR -> eta -> PTIR


def test_the_op_table_is_pies():
    assert len(OPS) == 55 and sorted(OPS) == list(OPS)
    assert OPS[0x65].name == "mask_apply_packed" and OPS[0x58].wire == ("value", "predicate")
    assert 0x59 not in OPS  # Pie retired the fused nucleus opcode


@pytest.mark.parametrize("cut,match", [
    (0, r"magic b'' is not b'PTIR'.*at byte offset 0"),
    (5, r"unexpected end of input reading version \(needs 2 bytes, 1 left\) at byte offset 4"),
    (30, r"channel table count 2 exceeds what the input can back .* at byte offset 12"),
    (40, r"unexpected end of input reading channel 1 shape dim 0 \(needs 4 bytes, 2 left\) at byte offset 38"),
    (45, r"unexpected end of input reading channel 1 capacity \(needs 4 bytes, 3 left\) at byte offset 42"),
])
def test_truncation_names_offset_and_field(cut, match):
    with pytest.raises(ValidationError, match=match):
        decode(CONTAINERS["greedy_argmax"][:cut])


def test_every_truncation_is_a_validation_error():
    data = CONTAINERS["nucleus_sample"]
    for cut in range(len(data)):
        with pytest.raises(ValidationError, match=r"at byte offset \d+\. Fix:"):
            decode(data[:cut])


def test_specific_malformed_fields_are_named():
    data = bytearray(CONTAINERS["greedy_argmax"])
    cases = {
        "version": (4, 7, r"unsupported container version 7 .*offset 4"),
        "flags": (6, 1, r"non-canonical encoding .*offset 6"),
        "channel dtype": (24, 9, r"unknown channel 0 dtype tag 0x09 .*offset 24"),
        "opcode": (None, 0x59, r"epilogue op 0: unknown opcode 0x59"),
    }
    head = decode(bytes(data))
    head.stages = []
    op0 = len(encode(head)) + 5  # the epilogue's stage byte and op count, then its first opcode
    for what, (at, value, match) in cases.items():
        bad = bytearray(data)
        bad[op0 if at is None else at] = value
        with pytest.raises(ValidationError, match=match):
            decode(bytes(bad))
    with pytest.raises(ValidationError, match=r"2 trailing bytes after the container at byte offset"):
        decode(bytes(data) + b"\0\0")
    with pytest.raises(ValidationError, match="name table count 4294967295 exceeds what the input can back"):
        decode(bytes(data[:8]) + b"\xff\xff\xff\xff" + bytes(data[12:]))
    with pytest.raises(ValidationError, match="needs bytes, got str"):
        decode("PTIR")


def test_flipped_bytes_give_a_clear_error_or_another_valid_container_never_a_crash():
    rng = random.Random(31)
    outcomes = {"rejected": 0, "still valid": 0}
    for name, data in sorted(CONTAINERS.items()):
        positions = range(len(data)) if len(data) < 200 else rng.sample(range(len(data)), 200)
        for i in positions:
            mutant = bytearray(data)
            mutant[i] ^= rng.choice((0x01, 0x80, 0xFF))
            mutant = bytes(mutant)
            try:
                prog = load(mutant)
            except ValidationError as e:
                assert "Fix:" in str(e), (name, i, e)
                outcomes["rejected"] += 1
                continue
            # what still loads is a different, canonical, valid container: it re-encodes to the mutated bytes
            assert prog.to_ptir() == mutant and container_hash(mutant) != container_hash(data), (name, i)
            outcomes["still valid"] += 1
    assert outcomes["rejected"] > 5 * outcomes["still valid"] > 0, outcomes
