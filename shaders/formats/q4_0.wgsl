// Weight format Q4_0 (GGML), read as GGUF stores it: each block of 32 weights is 18
// bytes: f16 d, then 16 bytes of nibbles (weight j: low nibble of byte j for j < 16,
// high nibble of byte j - 16 otherwise); weight j is d * (q_j - 8). 18-byte blocks sit
// at 2-byte alignment, so WB = 1 makes the address the block's index and the byte offset
// is 18 * index; u32_at joins two words when a field starts mid-word.
//! include blocks/storage_weights
const WB: u32 = 1u;
const BB: u32 = 18u;  // bytes per block

//! include blocks/halfwords
//! include blocks/nibbles

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let o = wb * BB;
  let v0 = u32_at_k(o + 2u, 0u);
  let v1 = u32_at_k(o + 2u, 1u);
  let v2 = u32_at_k(o + 2u, 2u);
  let v3 = u32_at_k(o + 2u, 3u);
  return f16_at(o) * (nib_dot(vec4<u32>(v0, v1, v2, v3), x0, x1, x2, x3, x4, x5, x6, x7) - 8.0 * xsum);
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let o = wb * BB;
  return f16_at(o) * (nib4(u32_at_k(o + 2u, j % 4u), (j / 4u) * 4u) - 8.0);
}

// The token-tile matmul (matmul.wgsl): raw nibbles of vec4 j, and (d, m) = (d, -8 d).
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return nib4(u32_at_k(wb * BB + 2u, j % 4u), select(0u, 4u, j >= 4u));
}

fn block_dm(wb: u32) -> vec2<f32> {
  let d = f16_at(wb * BB);
  return vec2<f32>(d, -8.0 * d);
}
