// The 4-bit field at bit s of each byte of v, as a vec4 (the GGML 4- and 5-bit formats).
fn nib4(v: u32, s: u32) -> vec4<f32> {
  return vec4<f32>(f32((v >> s) & 15u), f32((v >> (s + 8u)) & 15u),
                   f32((v >> (s + 16u)) & 15u), f32((v >> (s + 24u)) & 15u));
}

// sum_j q_j x_j over a block's 32 nibbles (v: its 4 words; weight j the low nibble of byte j for
// j < 16, the high nibble of byte j - 16 otherwise) and its 32 inputs x0..x7.
fn nib_dot(v: vec4<u32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
           x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>) -> f32 {
  let s = nib4(v.x, 0u) * x0 + nib4(v.y, 0u) * x1 + nib4(v.z, 0u) * x2 + nib4(v.w, 0u) * x3
        + nib4(v.x, 4u) * x4 + nib4(v.y, 4u) * x5 + nib4(v.z, 4u) * x6 + nib4(v.w, 4u) * x7;
  return s.x + s.y + s.z + s.w;
}
