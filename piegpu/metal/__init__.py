"""eta -> Metal Shading Language (emit.py; the C++ rules come from piegpu/kernel/cxx.py)."""
