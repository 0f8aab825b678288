"""Kernel IR (KIR): planned, target-neutral compute kernels that every device backend renders."""
