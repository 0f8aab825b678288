"""Pie's PTIR containers <-> eta programs (github pie-project/pie, compiler/ir; format and values, not code).

    prog = ptir.load(open("nucleus.ptir", "rb").read())   # decode, validate as Pie does, translate
    fwd.epilogue_program(ptir_bytes, channels={"chan0": state, ...})   # PTIR bytes work wherever eta bytes do
    prog.to_ptir()                                         # back to a container Pie's engines run
    ptir.check_golden(open("greedy_argmax.txt").read(), backend="spirv").ok
"""

from __future__ import annotations

from .export import to_ptir
from .golden import GoldenReport, check_golden
from .sampler import as_sampler
from .translate import load, profile_for, to_eta
from .validate import Profile, PtirRejected, bind, piegpu_profile
from .wire import MAGIC, Container, decode, encode, fnv1a64  # noqa: F401

__all__ = ["load", "as_sampler", "is_ptir", "to_ptir", "check_golden", "GoldenReport", "PtirRejected", "Profile",
           "decode", "encode", "fnv1a64", "container_hash", "MAGIC"]


def is_ptir(data) -> bool:
    """True when `data` starts with PTIR's magic bytes."""
    return isinstance(data, (bytes, bytearray, memoryview)) and bytes(data[:4]) == MAGIC


def container_hash(data: bytes) -> str:
    """Pie's identity of a container: FNV-1a 64 of its bytes, as Pie prints it (0x%016x)."""
    return f"0x{fnv1a64(bytes(data)):016x}"
