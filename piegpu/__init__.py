"""piegpu: a cross-platform GPU runtime for local LLM inference with traced device epilogues."""

from . import eta
from .dtypes import dtype
from .errors import (ChannelError, ChannelFull, CompileError, DeviceError, ModelError, PieGpuError, TraceError,
                     ValidationError)

__version__ = "0.1.0"

# Runtime names pull in wgpu: each is imported from its module only when it is first used.
_LAZY = {
    "Channel": "piegpu.runtime.channel", "channel_capacity": "piegpu.runtime.window",
    "ForwardPass": "piegpu.runtime.forward", "StateGeometry": "piegpu.runtime.forward",
    "Pipeline": "piegpu.runtime.pipeline",
    "Model": "piegpu.textgen.model", "load_model": "piegpu.textgen.model",
    "samplers": "piegpu.samplers", "Lookup": "piegpu.textgen.speculation",
}


def __getattr__(name: str):
    """The lazily imported runtime names (see _LAZY)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'piegpu' has no attribute {name!r}")
    import importlib
    mod = importlib.import_module(module)
    value = mod if module.endswith("." + name) else getattr(mod, name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


__all__ = list(_LAZY) + ["eta", "dtype", "PieGpuError", "TraceError", "ValidationError", "CompileError",
                         "ChannelError", "ChannelFull", "ModelError", "DeviceError", "__version__"]
