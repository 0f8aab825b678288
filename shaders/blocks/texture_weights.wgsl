// The weights of a texture format (gpu_weights.py, TextureWeights): block wb's quants at texel
// wb of `wq` (rgba32uint; Q8_0 takes two texels a block) and its scale word at texel wb / WB of
// `wd` (r32uint), both in rows of 4096 texels. On lavapipe a texel fetch gathers every lane's
// words at once where a storage load loops over the lanes one by one: the default model's Q4_1
// matvecs took 0.74-0.87x the time, its 8-token matmuls 0.65-0.91x.
@group(0) @binding(0) var wq: texture_2d<u32>;
@group(0) @binding(15) var wd: texture_2d<u32>;

fn q_texel(i: u32) -> vec4<u32> {
  return textureLoad(wq, vec2<u32>(i & 4095u, i >> 12u), 0);
}

fn d_word(i: u32) -> u32 {
  return textureLoad(wd, vec2<u32>(i & 4095u, i >> 12u), 0).x;
}
