// Weight format Q5_0 (GGML), read as GGUF stores it: each block of 32 weights is 22
// bytes: f16 d, the 32 high bits qh, 16 bytes of low nibbles (weight j: byte j's low
// nibble for j < 16, byte j - 16's high nibble otherwise); weight j is
// d * (q_j - 16), q_j = low nibble + 16 * bit j of qh. Blocks sit at 2-byte alignment:
// WB = 1 makes the address the block's index (byte offset 22 * index).
//! include blocks/storage_weights
const WB: u32 = 1u;
const BB: u32 = 22u;

//! include blocks/halfwords
//! include blocks/nibbles
//! include blocks/qh_bits

// Raw values q (0..31) of vec4 j of the block at byte o.
fn q5(o: u32, qh: u32, j: u32) -> vec4<f32> {
  return nib4(u32_at_k(o + 6u, j % 4u), select(0u, 4u, j >= 4u)) + hi4(qh, 4u * j);
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let o = wb * BB;
  let qh = u32_at(o + 2u);
  let s = q5(o, qh, 0u) * x0 + q5(o, qh, 1u) * x1 + q5(o, qh, 2u) * x2 + q5(o, qh, 3u) * x3
        + q5(o, qh, 4u) * x4 + q5(o, qh, 5u) * x5 + q5(o, qh, 6u) * x6 + q5(o, qh, 7u) * x7;
  return f16_at(o) * ((s.x + s.y + s.z + s.w) - 16.0 * xsum);
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let o = wb * BB;
  return f16_at(o) * (q5(o, u32_at(o + 2u), j) - 16.0);
}

fn block_q(wb: u32, j: u32) -> vec4<f32> {
  let o = wb * BB;
  return q5(o, u32_at(o + 2u), j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  let d = f16_at(wb * BB);
  return vec2<f32>(d, -16.0 * d);
}
