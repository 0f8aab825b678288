// Weight format Q5_K (GGML), read as GGUF stores it: a super-block of 256 weights is 176
// bytes = 44 words: f16 d and f16 dmin, 12 bytes of 6-bit scales and mins (as Q4_K),
// 32 bytes qh, then 128 bytes of low nibbles. Weight i of sub-block s is
// (d * sc_s) * q - dmin * m_s with q = nibble (4 * (s % 2)) of byte 32 * (s / 2) + i,
// plus 16 * bit s of qh[i] (gguf's order of operations: bit-identical values).
// WB = 1: the address is the 32-weight block's index g (super-block g / 8, sub-block g % 8). A super-block is
// 11 vec4s of words (blocks/storage_vec4s): the head (d, dmin, scales), qh in vec4s 1..2, the nibbles from 3.
//! include blocks/storage_vec4s
const WB: u32 = 1u;
const SV: u32 = 11u;  // vec4s per super-block

//! include blocks/nibbles

// Bit b of each byte of v, times 16.
fn hb4(v: u32, b: u32) -> vec4<f32> {
  return 16.0 * vec4<f32>(f32((v >> b) & 1u), f32((v >> (b + 8u)) & 1u),
                          f32((v >> (b + 16u)) & 1u), f32((v >> (b + 24u)) & 1u));
}

//! include blocks/k_scales

// Raw values (0..31) of vec4 j of block g.
fn qv(g: u32, j: u32) -> vec4<f32> {
  let base = (g / 8u) * SV;
  let s = g % 8u;
  return nib4(w4[base + 3u + 2u * (s / 2u) + j / 4u][j % 4u], 4u * (s % 2u)) + hb4(w4[base + 1u + j / 4u][j % 4u], s);
}

//! include blocks/k_block
