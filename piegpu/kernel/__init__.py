"""Kernel IR (KIR): planned, target-neutral compute kernels that every device backend renders.

plan.py (what is stored, kernels in dispatch order), inline.py (elementwise, shape, index,
rng and runtime values inlined at an index), the templates of stored ops (templates.py:
op -> template, map, matmul, scatters, channel commit; reductions.py; sorting.py;
workgroups.py: sizing), render.py (the Renderer contract: emit(prog, limits)), and the
renderer bases cstyle.py (C family) and cxx.py (C++: CUDA, HIP, Metal). Which file lowers
op X for target Y: the table in piegpu/targets.py.
"""
