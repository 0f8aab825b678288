"""Runtime-provided values inside epilogues: the logits of readout rows, the vocab size."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import dtype
from ..errors import TraceError, ValidationError
from .ops import TType
from .tracer import Tensor, current


@dataclass
class IntrinsicContext:
    """What a trace may ask the runtime for: name -> (cell type, number of rows)."""

    values: dict = field(default_factory=dict)

    @staticmethod
    def for_logits(vocab: int, rows: int = 1) -> "IntrinsicContext":
        """The context of a forward pass with `rows` readout rows of `vocab` logits."""
        return IntrinsicContext({"logits": (TType(dtype.f32, (vocab,)), rows)})

    def type_of(self, name: str, index: int) -> TType:
        """The type of intrinsic `name` row `index` (ValidationError if unknown or out of range)."""
        if name not in self.values:
            raise ValidationError(f"unknown intrinsic {name!r}. Fix: use one of {sorted(self.values)}")
        ty, rows = self.values[name]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < rows:
            raise ValidationError(f"intrinsic {name!r} row {index!r} out of range: this pass has {rows} "
                                  "readout row(s). Fix: pick a row in range, or widen fwd.readout(...)")
        return ty


def _context() -> IntrinsicContext:
    b = current()
    if b.context is None:
        raise TraceError("intrinsics are only available inside a ForwardPass epilogue. Fix: decorate the "
                         "function with @fwd.epilogue, or pass context=IntrinsicContext.for_logits(V) to eta.trace")
    return b.context


def output(index: int, name: str = "logits") -> Tensor:
    """The f32 [vocab] `name` of readout row `index` (row 0: the last embedded token)."""
    ty = _context().type_of(name, index)
    return current().add("intrinsic", [], name=name, index=index, dtype=ty.dtype, shape=ty.shape)


def outputs(name: str = "logits") -> Tensor:
    """The f32 [rows, vocab] `name` of every readout row (row i: sequence i's last embedded token by default)."""
    ty = _context().type_of(name, 0)
    rows = _context().values[name][1]
    return current().add("intrinsic", [], name=name, index=0, dtype=ty.dtype, shape=(rows,) + tuple(ty.shape))


def vocab() -> int:
    """The vocabulary size of the forward pass being traced, as a Python int."""
    return _context().type_of("logits", 0).shape[-1]


def readouts() -> int:
    """How many readout rows the forward pass being traced has."""
    return _context().values["logits"][1]
