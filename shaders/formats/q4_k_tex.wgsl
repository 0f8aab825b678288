// Weight format Q4_K (GGML) in textures (blocks/texture_weights, gpu_weights._q4_k_texels): each 32-weight
// sub-block is a block of its own -- its nibbles one texel of wq in Q4_1's order (weight j the low nibble of byte j
// for j < 16, the high nibble of byte j - 16), its 6-bit scale sc and min m bytes 0 and 1 (even blocks) or 2 and 3
// (odd) of the scale word of its pair of blocks (ws), and the f16 (d, dmin) of its super-block (block b / 8 of the
// row) a word of `wd`, four rows a texel like the scale words. Weight j is (d * sc) * q_j - dmin * m: gguf's values
// and order of operations (formats/q4_k.wgsl), 148 bytes a super-block against GGUF's 144.
//! include blocks/texture_weights
@group(0) @binding(16) var wd: texture_2d<u32>;
const WB: u32 = 1u;
const SCALE_BLOCKS: u32 = 2u;  // blocks a scale word
const NSB: u32 = NB / 8u;  // super-blocks a row

//! include blocks/nibble_texel

// (d sc, -dmin m) of row `row`'s block b from its pair's scale word: weight = d q + m.
fn dm_at(word: u32, row: u32, b: u32) -> vec2<f32> {
  let i = (row / 4u) * NSB + b / 8u;
  let dd = unpack2x16float(textureLoad(wd, vec2<u32>(i & 4095u, i >> 12u), 0)[row % 4u]);
  let h = word >> (16u * (b & 1u));
  return vec2<f32>(dd.x * f32(h & 255u), -(dd.y * f32((h >> 8u) & 255u)));
}
