// Weight format Q6_K (GGML), read as GGUF stores it: a super-block of 256 weights is 210
// bytes: 128 bytes ql (low nibbles), 64 bytes qh (2-bit highs), 16 signed 8-bit scales
// (one per 16 weights), f16 d. Weight i of sub-block s (32 weights) is
// (d * sc_{2s + i/16}) * (q - 32), q = nibble (4 * ((s / 2) % 2)) of ql byte
// 64 * (s / 4) + 32 * (s % 2) + i, plus 16 * bits (2 * (s % 4)) of qh byte 32 * (s / 4) + i
// (gguf's order of operations: bit-identical values). Super-blocks sit at 2-byte
// alignment: WB = 1 makes the address the 32-weight block's index g, super-block g / 8
// at byte 210 * (g / 8).
//! include blocks/storage_weights
const WB: u32 = 1u;
const SB: u32 = 210u;

//! include blocks/halfwords
//! include blocks/nibbles

// 2-bit fields at bit b of each byte of v, times 16.
fn hb4(v: u32, b: u32) -> vec4<f32> {
  return 16.0 * vec4<f32>(f32((v >> b) & 3u), f32((v >> (b + 8u)) & 3u),
                          f32((v >> (b + 16u)) & 3u), f32((v >> (b + 24u)) & 3u));
}

// q - 32 (-32..31) of vec4 j of block g.
fn qv(g: u32, j: u32) -> vec4<f32> {
  let o = (g / 8u) * SB;
  let s = g % 8u;
  let ql = nib4(u32_at_k(o + 64u * (s / 4u) + 32u * (s % 2u), j), 4u * ((s / 2u) % 2u));
  return ql + hb4(u32_at_k(o + 128u + 32u * (s / 4u), j), 2u * (s % 4u)) - 32.0;
}

// d * sc_k for the scale of vec4 j of block g (weights 16 * (j / 4) .. of the sub-block).
fn dsc(g: u32, j: u32) -> f32 {
  let o = (g / 8u) * SB;
  let k = 192u + 2u * (g % 8u) + j / 4u;
  let byte = (w[(o + k) >> 2u] >> (8u * ((o + k) & 3u))) & 255u;
  return f16_at(o + 208u) * f32(bitcast<i32>(byte << 24u) >> 24u);
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let lo = qv(wb, 0u) * x0 + qv(wb, 1u) * x1 + qv(wb, 2u) * x2 + qv(wb, 3u) * x3;
  let hi = qv(wb, 4u) * x4 + qv(wb, 5u) * x5 + qv(wb, 6u) * x6 + qv(wb, 7u) * x7;
  return dsc(wb, 0u) * (lo.x + lo.y + lo.z + lo.w) + dsc(wb, 4u) * (hi.x + hi.y + hi.z + hi.w);
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  return dsc(wb, j) * qv(wb, j);
}

// The token-tile matmul (matmul.wgsl): two scales per 32-weight block do not factor out,
// so block_q returns the scaled values and (d, m) = (1, 0).
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return dsc(wb, j) * qv(wb, j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  return vec2<f32>(1.0, 0.0);
}
