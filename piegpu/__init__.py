"""piegpu: a cross-platform GPU runtime for local LLM inference with traced device epilogues."""

from . import eta
from .dtypes import dtype
from .errors import (ChannelError, ChannelFull, CompileError, DeviceError, ModelError, PieGpuError, TraceError,
                     ValidationError)

__version__ = "0.1.0"


def __getattr__(name):
    # The runtime pulls in wgpu; import it only when a runtime name is used.
    from . import runtime_exports
    if name in runtime_exports.NAMES:
        return getattr(runtime_exports, name)
    raise AttributeError(f"module 'piegpu' has no attribute {name!r}")


__all__ = ["eta", "dtype", "PieGpuError", "TraceError", "ValidationError", "CompileError", "ChannelError",
           "ChannelFull", "ModelError", "DeviceError", "__version__"]
