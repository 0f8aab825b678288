"""The piegpu error taxonomy: every error says what was wrong, where, and the fix."""

from __future__ import annotations


class PieGpuError(Exception):
    """Base class of every error piegpu raises on purpose."""


class TraceError(PieGpuError):
    """Misuse of a traced tensor while tracing (bool(), int(), len(), wrong arity...)."""


class ValidationError(PieGpuError):
    """Bad shapes, dtypes, arguments or program bytes."""


class CompileError(PieGpuError):
    """A backend cannot emit a program, or the driver rejects a kernel."""


class ChannelError(PieGpuError):
    """Channel misuse, a take that can never be filled, or a poisoned channel."""


class ChannelFull(ChannelError):
    """A host put found no free cell in the channel."""


class ModelError(PieGpuError):
    """Missing or corrupt model files: config, weights or tokenizer."""


class DeviceError(PieGpuError):
    """No usable adapter, or the device was lost."""


__all__ = [
    "PieGpuError",
    "TraceError",
    "ValidationError",
    "CompileError",
    "ChannelError",
    "ChannelFull",
    "ModelError",
    "DeviceError",
]
