"""eta -> WGSL."""
