"""eta -> CUDA and HIP C++: emit.py (CUDA), emit_hip.py (HIP), cxx.py (the C++ rules they share with Metal)."""
