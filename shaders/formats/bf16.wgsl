// Weight format BF16 (GGUF BF16, uploaded as stored): each block of 32 weights is 16
// words, two bfloat16 per word (weight 2i in the low half). A bfloat16 is the high half
// of an f32, so widening is a shift: the values equal gguf's dequantization bit for bit.
//! include blocks/storage_weights
const WB: u32 = 16u;

// Weights 4j .. 4j + 3 of the block at word wb: words wb + 2j and wb + 2j + 1.
fn wv(wb: u32, j: u32) -> vec4<f32> {
  let i = wb + 2u * j;
  let a = w[i];
  let b = w[i + 1u];
  return bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xFFFF0000u, b << 16u, b & 0xFFFF0000u));
}

//! include blocks/float_block
