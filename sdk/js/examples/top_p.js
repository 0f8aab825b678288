// Top-p (nucleus) sampling as an eta container: the same program as piegpu's
// `samplers.top_p(0.9, 0.8).sample` (what `piegpu generate --sampler top-p --top-p 0.9 --temperature 0.8` draws with).
//
//   node sdk/js/examples/top_p.js > top_p.eta          (or: piegpu compile sdk/js/examples/top_p.js:topP)
import { dtype, gumbelMax, maskApply, minimum, sanitize, spec, topPMask, trace } from "../src/index.js";
import { writeWhenRun } from "./write.js";

const VOCAB = 49152;
const P = 0.9;
const TEMPERATURE = 0.8;
const F32_MAX = 3.4028234663852886e38;

/** (logits f32[vocab], state u32[2]) -> i32 token: temperature, top-p mask, Gumbel-max draw. */
export function sampleTopP(logits, state) {
  let x = sanitize(logits).mul(1.0 / TEMPERATURE);
  x = minimum(x, F32_MAX); // +inf logits stay the largest finite value, so softmax stays defined
  x = maskApply(x, topPMask(x, P));
  return gumbelMax(x, state);
}

export const topP = trace(sampleTopP, spec([VOCAB], dtype.f32), spec([2], dtype.u32));

writeWhenRun(import.meta.url, topP);
