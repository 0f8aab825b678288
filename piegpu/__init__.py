"""piegpu: a cross-platform GPU runtime for local LLM inference with traced device epilogues."""

from . import eta
from .dtypes import dtype
from .errors import (ChannelError, ChannelFull, CompileError, DeviceError, ModelError, PieGpuError, TraceError,
                     ValidationError)

__version__ = "0.1.0"


_RUNTIME = ("Channel", "channel_capacity", "ForwardPass", "StateGeometry", "Model", "load_model", "Pipeline",
            "samplers")


def __getattr__(name):
    # The runtime pulls in wgpu; import it only when a runtime name is used.
    if name in _RUNTIME:
        import importlib
        return getattr(importlib.import_module("piegpu.runtime_exports"), name)
    raise AttributeError(f"module 'piegpu' has no attribute {name!r}")


__all__ = list(_RUNTIME) + ["eta", "dtype", "PieGpuError", "TraceError", "ValidationError", "CompileError", "ChannelError",
           "ChannelFull", "ModelError", "DeviceError", "__version__"]
