// Weight format Q4_1 (GGML) in textures (blocks/texture_weights): block wb's 4 words of nibbles
// are texel wb of wq, its (d, m) f16 pair the block's scale word. Weight j of the block is d * q_j + m,
// q_j the low nibble of byte j for j < 16 and the high nibble of byte j - 16 otherwise -- the
// values of formats/q4_1.wgsl (GGUF's bytes, moved, not converted). Q4_0 takes this layout too
// (gpu_weights._q4_0_texels: d (q - 8) = d q + m with m = -8 d, exact in f16).
//! include blocks/texture_weights
const SCALE_BLOCKS: u32 = 1u;  // blocks a scale word
const WB: u32 = 1u;

//! include blocks/nibble_texel

// (d, m) of a scale word: weight = d q + m.
fn dm_at(word: u32, row: u32, b: u32) -> vec2<f32> {
  return unpack2x16float(word);
}
