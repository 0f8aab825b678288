// Weight format Q4_K (GGML), read as GGUF stores it: a super-block of 256 weights is 144
// bytes = 36 words: f16 d and f16 dmin, 12 bytes of 6-bit scales and mins (8 of each),
// then 128 bytes of nibbles. Sub-block s (32 weights) has scale sc_s and min m_s;
// its weight i is (d * sc_s) * q - dmin * m_s, q the nibble (4 * (s % 2)) of byte
// 32 * (s / 2) + i -- gguf's order of operations, so the values match bit for bit.
// WB = 1: the address the shaders pass is the 32-weight block's index g; the
// super-block is g / 8 and the sub-block g % 8. A super-block is 9 vec4s of words (blocks/storage_vec4s):
// the head (d, dmin, scales), then sub-blocks 2k and 2k + 1's nibbles in vec4s 1 + 2k and 2 + 2k.
//! include blocks/storage_vec4s
const WB: u32 = 1u;
const SV: u32 = 9u;  // vec4s per super-block

//! include blocks/nibbles
//! include blocks/k_scales

// Nibbles of vec4 j (weights 4j .. 4j+3) of block g.
fn qv(g: u32, j: u32) -> vec4<f32> {
  let s = g % 8u;
  return nib4(w4[(g / 8u) * SV + 1u + 2u * (s / 2u) + j / 4u][j % 4u], 4u * (s % 2u));
}

//! include blocks/k_block
