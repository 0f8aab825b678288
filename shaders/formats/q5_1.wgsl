// Weight format Q5_1 (GGML), read as GGUF stores it: each block of 32 weights is 24
// bytes = 6 words: (d, m) as two f16, the 32 high bits qh, then 4 words of low nibbles.
// Weight j is d * q_j + m with q_j = low nibble (byte j for j < 16, high nibble of byte
// j - 16 otherwise) + 16 * bit j of qh.
//! include blocks/storage_weights
const WB: u32 = 6u;

//! include blocks/nibbles
//! include blocks/qh_bits

// Raw values q of vec4 j (weights 4j .. 4j+3) of the block at wb.
fn q5(wb: u32, qh: u32, j: u32) -> vec4<f32> {
  return nib4(w[wb + 2u + j % 4u], select(0u, 4u, j >= 4u)) + hi4(qh, 4u * j);
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let qh = w[wb + 1u];
  let s = q5(wb, qh, 0u) * x0 + q5(wb, qh, 1u) * x1 + q5(wb, qh, 2u) * x2 + q5(wb, qh, 3u) * x3
        + q5(wb, qh, 4u) * x4 + q5(wb, qh, 5u) * x5 + q5(wb, qh, 6u) * x6 + q5(wb, qh, 7u) * x7;
  let dm = unpack2x16float(w[wb]);
  return dm.x * (s.x + s.y + s.z + s.w) + dm.y * xsum;
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let dm = unpack2x16float(w[wb]);
  return dm.x * q5(wb, w[wb + 1u], j) + dm.y;
}

fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return q5(wb, w[wb + 1u], j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  return unpack2x16float(w[wb]);
}
