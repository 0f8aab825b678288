// The error classes of piegpu (piegpu/errors.py), under the same names.

/** Base class of every error this package throws. */
export class PieGpuError extends Error {
  constructor(message) {
    super(message);
    this.name = this.constructor.name;
  }
}

/** Misuse while tracing: a tensor used as a number or boolean, an ambiguous literal, an op outside a trace. */
export class TraceError extends PieGpuError {}

/** Shapes, dtypes, bad container bytes. */
export class ValidationError extends PieGpuError {}

/** Throw the ValidationError every type rule uses: op, what is wrong, and the fix. */
export function fail(op, what, fix) {
  throw new ValidationError(`${op}: ${what}. Fix: ${fix}`);
}
