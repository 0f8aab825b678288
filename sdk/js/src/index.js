// piegpu eta tracer for JavaScript: trace device epilogues into eta containers whose bytes and
// hash equal the Python tracer's for the same program (docs/container.md).

export { PieGpuError, TraceError, ValidationError } from "./errors.js";
export { DType, TType, dtype } from "./types.js";
export { OPS, GroupOp } from "./ops.js";
export { MAGIC, VERSION, Node, Program } from "./program.js";
export {
  Channel, Scalar, Tensor, channel, f32, forLogits, i32, intrinsics, spec, trace, u32,
} from "./tracer.js";
export {
  abs, add, and, bitAnd, bitNot, bitOr, bitXor, bitcast, broadcast, cast, concat, cos, cumprod, cumsum, div, eq, exp,
  floor, floordiv, gather, gatherRow, ge, gt, gumbel, iota, isinf, isnan, jsName, le, log, lt, matmul, maximum,
  minimum, mul, ne, neg, not, or, pow, recip, reduceArgmax, reduceArgmin, reduceMax, reduceMin, reduceSum, rem,
  reshape, rng, rsqrt, scatterAdd, scatterSet, select, shl, shr, sign, sin, sliceLast, sortDesc, sqrt, sub, takeLast,
  tanh, topK, transpose,
} from "./api.js";
export {
  entropy, gumbelMax, logSoftmax, maskApply, maskedArgmax, minPMask, sanitize, softmax, topAMask, topKMask, topPMask,
} from "./composites.js";
