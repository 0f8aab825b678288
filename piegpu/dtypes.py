"""The element types of eta tensors and of channel cells."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """One element type: its name, numpy type, byte code in program bytes and kind."""

    name: str
    np: type
    code: int
    kind: str  # "float", "int", "uint", "bool"

    def __repr__(self) -> str:
        return f"dtype.{self.name}"

    @property
    def is_float(self) -> bool:
        """True for floating-point types."""
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """True for the 32-bit integer types (i32, u32)."""
        return self.kind in ("int", "uint")

    @property
    def is_numeric(self) -> bool:
        """True for every type that supports arithmetic (not bool)."""
        return self.kind != "bool"

    @property
    def itemsize(self) -> int:
        """Bytes per element on the device (bool is stored as a 32-bit word)."""
        return 2 if self.name == "f16" else 4


class _DTypes:
    """Namespace of the dtypes: dtype.f32, dtype.i32, dtype.u32, dtype.bool, dtype.f16."""

    f32 = DType("f32", np.float32, 1, "float")
    i32 = DType("i32", np.int32, 2, "int")
    u32 = DType("u32", np.uint32, 3, "uint")
    bool = DType("bool", np.bool_, 4, "bool")
    f16 = DType("f16", np.float16, 5, "float")

    def __iter__(self):
        return iter((self.f32, self.i32, self.u32, self.bool, self.f16))

    def from_code(self, code: int) -> DType:
        """The dtype whose program-bytes code is `code` (KeyError if none)."""
        for d in self:
            if d.code == code:
                return d
        raise KeyError(code)

    def from_name(self, name: str) -> DType:
        """The dtype called `name` ("f32", "i32", ...)."""
        for d in self:
            if d.name == name:
                return d
        raise KeyError(name)

    def from_numpy(self, npdt) -> DType:
        """The dtype matching a numpy dtype (float64 maps to f32, int64 to i32)."""
        npdt = np.dtype(npdt)
        if npdt == np.bool_:
            return self.bool
        if npdt.kind == "f":
            return self.f16 if npdt == np.float16 else self.f32
        if npdt.kind == "u":
            return self.u32
        if npdt.kind == "i":
            return self.i32
        raise KeyError(str(npdt))


dtype = _DTypes()
