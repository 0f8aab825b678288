"""Inferlets: decoding programs built from device epilogues and channels.

    grammar       grammar-constrained decoding on llguidance (GBNF, Lark, regex, JSON Schema; host mask -> device)
    json_mode     generate_json(): JSON text and its parsed value through the grammar engine
    speculative   prompt-lookup drafts verified on the device (StateGeometry.accepting)
    watermark     greenlist watermark applied in the epilogue, and its host detector

Import the submodules directly (`from piegpu.inferlets import json_mode`); they load wgpu lazily.
"""

__all__ = ["grammar", "json_mode", "speculative", "watermark"]
