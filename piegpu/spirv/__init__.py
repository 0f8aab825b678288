"""eta -> SPIR-V: our own binary emitter over the planned kernel IR (no external compiler)."""
