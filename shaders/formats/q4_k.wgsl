// Weight format Q4_K (GGML), read as GGUF stores it: a super-block of 256 weights is 144
// bytes = 36 words: f16 d and f16 dmin, 12 bytes of 6-bit scales and mins (8 of each),
// then 128 bytes of nibbles. Sub-block s (32 weights) has scale sc_s and min m_s;
// its weight i is (d * sc_s) * q - dmin * m_s, q the nibble (4 * (s % 2)) of byte
// 32 * (s / 2) + i -- gguf's order of operations, so the values match bit for bit.
// WB = 1: the address the shaders pass is the 32-weight block's index g; the
// super-block is g / 8 and the sub-block g % 8.
const WB: u32 = 1u;
const SW: u32 = 36u;  // words per super-block

//! include blocks/nibbles
//! include blocks/k_scales

// Nibbles of vec4 j (weights 4j .. 4j+3) of block g.
fn qv(g: u32, j: u32) -> vec4<f32> {
  let s = g % 8u;
  return nib4(w[(g / 8u) * SW + 4u + 8u * (s / 2u) + j], 4u * (s % 2u));
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

// The token-tile matmul (matmul.wgsl): nibbles of vec4 j, and (d, m) = (d sc, -dmin m).
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return qv(wb, j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  let dm = sub_dm((wb / 8u) * SW, wb % 8u);
  return vec2<f32>(dm.x, -dm.y);
}
