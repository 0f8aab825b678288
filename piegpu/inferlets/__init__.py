"""Inferlets: decoding programs built from device epilogues and channels.

    json_mode     grammar-constrained JSON (host automaton -> u32 token bitmask -> device)
    speculative   prompt-lookup drafts verified on the device (StateGeometry.accepting)
    watermark     greenlist watermark applied in the epilogue, and its host detector

Import the submodules directly (`from piegpu.inferlets import json_mode`); they load wgpu lazily.
"""

__all__ = ["json_mode", "speculative", "watermark"]
