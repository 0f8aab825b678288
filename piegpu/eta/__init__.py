"""eta: trace Python functions over tensors into programs, and compile them.

    prog = eta.trace(fn, eta.spec([V], dtype.f32), eta.spec([2], dtype.u32))
    prog.emit("wgsl"); prog.run(x, state, backend="interp")
"""

from . import intrinsics
from .api import *  # noqa: F401,F403  (the core op functions)
from .api import (BINARY, REDUCE, UNARY, bitcast, broadcast, cast, concat, gather, gather_row, gumbel, iota,
                  matmul, reshape, rng, scatter_add, scatter_set, select, slice_last, sort_desc, take_last,
                  top_k, transpose)
from .cache import cache_stats, clear_memory_cache
from .composites import (entropy, gumbel_max, log_softmax, mask_apply, masked_argmax, min_p_mask, sanitize,
                         softmax, top_a_mask, top_k_mask, top_p_mask)
from .intrinsics import IntrinsicContext
from .ops import OPS, TType
from .program import Node, Program
from .tracer import Tensor, spec, trace

__all__ = (["trace", "spec", "Program", "Node", "Tensor", "TType", "OPS", "intrinsics", "IntrinsicContext",
            "cache_stats", "clear_memory_cache", "select", "cast", "bitcast", "reshape", "broadcast", "transpose",
            "iota", "concat", "slice_last", "gather", "gather_row", "take_last", "scatter_set", "scatter_add",
            "top_k", "sort_desc", "matmul", "rng", "gumbel", "softmax", "log_softmax", "entropy", "mask_apply",
            "masked_argmax", "gumbel_max", "top_k_mask", "top_p_mask", "min_p_mask", "top_a_mask", "sanitize"]
           + UNARY + BINARY + REDUCE)
