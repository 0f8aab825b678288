"""Lazily imported runtime names of the top-level piegpu package."""

NAMES = ()
