// The weights of a texture format (gpu_weights.py, TextureWeights): block wb's quants at texel
// wb of `wq` (Q8_0 takes two texels a block) and the scale words of 4 rows' block b in one texel
// of `ws` ((row / 4) NB + b, component row % 4), both rgba32uint in rows of 4096 texels. On
// lavapipe a texel fetch loads every lane's texel at once where a storage load loops over the
// lanes one by one (and a one-channel fetch is a hardware gather, slower than four channels).
@group(0) @binding(0) var wq: texture_2d<u32>;
@group(0) @binding(15) var ws: texture_2d<u32>;

fn q_texel(i: u32) -> vec4<u32> {
  return textureLoad(wq, vec2<u32>(i & 4095u, i >> 12u), 0);
}

// The scale words of rows row .. row + 3 (row a multiple of 4) at block b: the 4-row kernels'
// one fetch for four rows.
fn block_scales4(row: u32, b: u32) -> vec4<u32> {
  let i = (row / 4u) * NB + b;
  return textureLoad(ws, vec2<u32>(i & 4095u, i >> 12u), 0);
}

// Block wb's scale word, for any row.
fn scale_word(wb: u32) -> u32 {
  let row = wb / (NB * WB);
  return block_scales4(row - row % 4u, (wb / WB) % NB)[row % 4u];
}
