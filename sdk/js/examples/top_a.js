// Top-a sampling as an eta container: the same program as examples/top_a.py's `top_a` (vocab 49152,
// a = 0.2, temperature 0.8), hence the same bytes, hash and cached kernel as the Python and Rust ones.
//
//   node sdk/js/examples/top_a.js > top_a.eta          (or: piegpu compile sdk/js/examples/top_a.js:topA)
//   piegpu generate "Once upon a time" --sampler-program top_a.eta --seed 7
import {
  broadcast, dtype, gumbelMax, maskApply, reduceMax, reshape, sanitize, softmax, spec, trace,
} from "../src/index.js";
import { writeWhenRun } from "./write.js";

const VOCAB = 49152;
const A = 0.2;
const TEMPERATURE = 0.8;

/** The sampler signature: (logits f32[vocab], state u32[2] = [key, counter]) -> i32 token. */
export function sampleTopA(logits, state) {
  const x = sanitize(logits).mul(1.0 / TEMPERATURE);
  const probs = softmax(x);
  const pmax = reduceMax(probs);
  const keep = probs.ge(broadcast(reshape(pmax.mul(pmax).mul(A), [1]), probs.shape));
  return gumbelMax(maskApply(x, keep), state);
}

export const topA = trace(sampleTopA, spec([VOCAB], dtype.f32), spec([2], dtype.u32));

writeWhenRun(import.meta.url, topA);
