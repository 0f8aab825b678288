// Weight format f32: each block of 32 weights is 32 words.
//! include blocks/storage_weights
const WB: u32 = 32u;

// Weights 4j .. 4j + 3 of the block at word wb: words wb + 4j .. wb + 4j + 3.
fn wv(wb: u32, j: u32) -> vec4<f32> {
  let i = wb + 4u * j;
  return bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}

//! include blocks/float_block
