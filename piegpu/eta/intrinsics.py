"""Runtime-provided values inside epilogues: the logits and final hidden states of readout rows, their sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import dtype
from ..errors import TraceError, ValidationError
from .ops import TType
from .tracer import Tensor, current

# Pie's pass inputs that piegpu's forward pass does not compute (it ends at the final norm and the lm_head).
NOT_PROVIDED = ("mtp_logits", "mtp_drafts", "value_head", "attn_score", "query", "layer")


@dataclass
class IntrinsicContext:
    """What a trace may ask the runtime for: name -> (cell type, number of rows)."""

    values: dict = field(default_factory=dict)

    @staticmethod
    def for_logits(vocab: int, rows: int = 1) -> "IntrinsicContext":
        """The context of a forward pass with `rows` readout rows of `vocab` logits."""
        return IntrinsicContext({"logits": (TType(dtype.f32, (vocab,)), rows)})

    @staticmethod
    def for_pass(vocab: int, hidden: int, rows: int = 1) -> "IntrinsicContext":
        """A forward pass's context: `rows` readout rows of `vocab` logits and of `hidden` final hidden-state values."""
        ctx = IntrinsicContext.for_logits(vocab, rows)
        ctx.values["hidden"] = (TType(dtype.f32, (hidden,)), rows)
        return ctx

    def type_of(self, name: str, index: int) -> TType:
        """The type of intrinsic `name` row `index` (ValidationError if unknown or out of range)."""
        if name not in self.values:
            raise ValidationError(_unknown(name, list(self.values)))
        ty, rows = self.values[name]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < rows:
            raise ValidationError(f"intrinsic {name!r} row {index!r} out of range: this pass has {rows} "
                                  "readout row(s). Fix: pick a row in range, or widen fwd.readout(...)")
        return ty


def _unknown(name: str, known: list) -> str:
    if name in NOT_PROVIDED:
        return (f"intrinsic {name!r} is not provided by piegpu's forward pass (it computes the readout rows' "
                f"{' and '.join(repr(k) for k in known)} only). Fix: read one of those, or run the epilogue on "
                "Pie's engine")
    if name == "hidden":
        return ("intrinsic 'hidden' is not in this trace's context (IntrinsicContext.for_logits has the logits "
                "only). Fix: trace with IntrinsicContext.for_pass(vocab, hidden_size, rows), or as a ForwardPass "
                "epilogue")
    return f"unknown intrinsic {name!r}. Fix: use one of {sorted(known)}"


def _context() -> IntrinsicContext:
    b = current()
    if b.context is None:
        raise TraceError("intrinsics are only available inside a ForwardPass epilogue. Fix: decorate the "
                         "function with @fwd.epilogue, or pass context=IntrinsicContext.for_logits(V) to eta.trace")
    return b.context


def output(index: int, name: str = "logits") -> Tensor:
    """The f32 `name` of readout row `index` (row 0: the last embedded token): "logits" [vocab], "hidden" [hidden_size].

    "hidden" is the row's final hidden state after the model's final RMSNorm: what the lm_head
    reads (transformers' last_hidden_state).
    """
    ty = _context().type_of(name, index)
    return current().add("intrinsic", [], name=name, index=index, dtype=ty.dtype, shape=ty.shape)


def outputs(name: str = "logits") -> Tensor:
    """The f32 [rows, size] `name` of every readout row (row i: sequence i's last embedded token by default)."""
    ty = _context().type_of(name, 0)
    rows = _context().values[name][1]
    return current().add("intrinsic", [], name=name, index=0, dtype=ty.dtype, shape=(rows,) + tuple(ty.shape))


def vocab() -> int:
    """The vocabulary size of the forward pass being traced, as a Python int."""
    return _context().type_of("logits", 0).shape[-1]


def hidden_size() -> int:
    """The model's hidden size (the length of `output(i, "hidden")`) in the forward pass being traced."""
    return _context().type_of("hidden", 0).shape[-1]


def readouts() -> int:
    """How many readout rows the forward pass being traced has."""
    return _context().values["logits"][1]
