// Weight format Q5_K (GGML), read as GGUF stores it: a super-block of 256 weights is 176
// bytes = 44 words: f16 d and f16 dmin, 12 bytes of 6-bit scales and mins (as Q4_K),
// 32 bytes qh, then 128 bytes of low nibbles. Weight i of sub-block s is
// (d * sc_s) * q - dmin * m_s with q = nibble (4 * (s % 2)) of byte 32 * (s / 2) + i,
// plus 16 * bit s of qh[i] (gguf's order of operations: bit-identical values).
// WB = 1: the address is the 32-weight block's index g (super-block g / 8, sub-block g % 8).
const WB: u32 = 1u;
const SW: u32 = 44u;

//! include blocks/nibbles

// Bit b of each byte of v, times 16.
fn hb4(v: u32, b: u32) -> vec4<f32> {
  return 16.0 * vec4<f32>(f32((v >> b) & 1u), f32((v >> (b + 8u)) & 1u),
                          f32((v >> (b + 16u)) & 1u), f32((v >> (b + 24u)) & 1u));
}

//! include blocks/k_scales

// Raw values (0..31) of vec4 j of block g.
fn qv(g: u32, j: u32) -> vec4<f32> {
  let base = (g / 8u) * SW;
  let s = g % 8u;
  return nib4(w[base + 12u + 8u * (s / 2u) + j], 4u * (s % 2u)) + hb4(w[base + 4u + j], s);
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let dm = sub_dm((wb / 8u) * SW, wb % 8u);
  let s = qv(wb, 0u) * x0 + qv(wb, 1u) * x1 + qv(wb, 2u) * x2 + qv(wb, 3u) * x3
        + qv(wb, 4u) * x4 + qv(wb, 5u) * x5 + qv(wb, 6u) * x6 + qv(wb, 7u) * x7;
  return dm.x * (s.x + s.y + s.z + s.w) - dm.y * xsum;
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  let dm = sub_dm((wb / 8u) * SW, wb % 8u);
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = dm.x * qv(wb, j) - dm.y;
  }
  return out;
}

fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return qv(wb, j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  let dm = sub_dm((wb / 8u) * SW, wb % 8u);
  return vec2<f32>(dm.x, -dm.y);
}
