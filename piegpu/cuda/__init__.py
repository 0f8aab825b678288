"""eta -> CUDA and HIP C++: emit.py (CUDA), emit_hip.py (HIP); the C++ rules they share with Metal are
piegpu/kernel/cxx.py."""
