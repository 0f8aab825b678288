// The greedy device loop's epilogue (API.md section 3) as an eta container: the argmax of readout
// row 0 is put into `token_in` (the next pass embeds it, device to device) and `token_out` (for the
// host). The Python runtime binds the channels by name:
//
//   node sdk/js/examples/greedy_loop.js > greedy_loop.eta
//   fwd.epilogue_program(eta.Program.from_bytes(open("greedy_loop.eta", "rb").read()),
//                        channels={"token_in": token_in, "token_out": token_out})
import { channel, dtype, forLogits, intrinsics, reduceArgmax, reshape, trace } from "../src/index.js";
import { writeWhenRun } from "./write.js";

const VOCAB = 49152;

export const greedyLoop = trace(function greedyLoop() {
  const tokenIn = channel("token_in", [1], dtype.i32);
  const tokenOut = channel("token_out", [1], dtype.i32);
  const token = reshape(reduceArgmax(intrinsics.output(0, "logits")), [1]);
  tokenIn.put(token);
  tokenOut.put(token);
}, { intrinsics: forLogits(VOCAB) });

writeWhenRun(import.meta.url, greedyLoop);
