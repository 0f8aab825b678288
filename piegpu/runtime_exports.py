"""Lazily imported runtime names of the top-level piegpu package (they pull in wgpu)."""

from .runtime.channel import Channel, channel_capacity
from .runtime.forward import ForwardPass, StateGeometry
from .loaded import Model, load_model
from .runtime.pipeline import Pipeline
from . import samplers

NAMES = ("Channel", "channel_capacity", "ForwardPass", "StateGeometry", "Model", "load_model", "Pipeline", "samplers")
