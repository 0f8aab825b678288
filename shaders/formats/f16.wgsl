// Weight format f16: each block of 32 weights is 16 words, two halves per word
// (weight 2i in the low half).
//! include blocks/storage_weights
const WB: u32 = 16u;

// Weights 4j .. 4j + 3 of the block at word wb: words wb + 2j and wb + 2j + 1.
fn wv(wb: u32, j: u32) -> vec4<f32> {
  let i = wb + 2u * j;
  return vec4<f32>(unpack2x16float(w[i]), unpack2x16float(w[i + 1u]));
}

//! include blocks/float_block
