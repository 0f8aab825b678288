"""Lazily imported runtime names of the top-level piegpu package (they pull in wgpu)."""

from .channel import Channel, channel_capacity
from .forward import ForwardPass, StateGeometry
from .model.loaded import Model, load_model
from .pipeline import Pipeline
from . import samplers

NAMES = ("Channel", "channel_capacity", "ForwardPass", "StateGeometry", "Model", "load_model", "Pipeline", "samplers")
