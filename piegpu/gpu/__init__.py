"""The wgpu device layer: adapter choice, compiled programs, buffers."""
