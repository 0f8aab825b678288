"""eta -> StableHLO: emit.py (MLIR text, op by op), mlir.py (the generic-syntax writer), run.py (XLA on the CPU)."""
