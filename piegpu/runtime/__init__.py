"""The runtime: device, compiled epilogues, channels, forward passes, the pipeline, sessions.

Imports point down only: runtime modules use eta, kernel and the targets, never the
model or anything above it (the pipeline drives a model through encode/encode_advance).
"""
