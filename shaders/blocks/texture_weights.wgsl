// The weights of a texture format with four rows' scale words a texel (gpu_weights.py, TextureWeights): block wb's
// quants at texel wb of `wq` (blocks/texture_quants; Q8_0 takes two texels a block) and the scale words of 4 rows'
// block b in one texel of `ws` ((row / 4) NB + b, component row % 4), both rgba32uint in rows of 4096 texels
// (a one-channel fetch is a hardware gather on lavapipe, slower than four channels). The format gives
// dm_at(word, row, b), the (d, m) of a block (weight d q + m) from its scale word, and block_dot_dm.
//! include blocks/texture_quants
@group(0) @binding(15) var ws: texture_2d<u32>;

// The scale words of rows row .. row + 3 (row a multiple of 4) at block b: the 4-row kernels'
// one fetch for four rows. A word holds the scales of SCALE_BLOCKS blocks (the format's constant).
fn block_scales4(row: u32, b: u32) -> vec4<u32> {
  let i = (row / 4u) * (NB / SCALE_BLOCKS) + b / SCALE_BLOCKS;
  return textureLoad(ws, vec2<u32>(i & 4095u, i >> 12u), 0);
}

// (d, m) of row row0 + k at block b from a block_scales4 fetch s (the generated 4-row code: model/shader_code.py).
fn dm_of4(s: vec4<u32>, row0: u32, b: u32, k: u32) -> vec2<f32> {
  return dm_at(s[k], row0 + k, b);
}

// Block wb's scale word, for any row.
fn scale_word(wb: u32) -> u32 {
  let row = wb / (NB * WB);
  return block_scales4(row - row % 4u, (wb / WB) % NB)[row % 4u];  // (all SCALE_BLOCKS blocks' scales)
}

fn block_dm(wb: u32) -> vec2<f32> {
  return dm_at(scale_word(wb), wb / (NB * WB), (wb / WB) % NB);
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  return block_dot_dm(wb, block_dm(wb), x0, x1, x2, x3, x4, x5, x6, x7, xsum);
}
