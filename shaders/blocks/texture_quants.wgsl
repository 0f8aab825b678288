// The quants of a texture format (gpu_weights.py, TextureWeights): block wb's quant texels from texel wb of `wq`
// (WB texels a block), rgba32uint in rows of 4096 texels. On lavapipe a texel fetch loads every lane's texel at
// once where a storage load loops over the lanes one by one.
@group(0) @binding(0) var wq: texture_2d<u32>;

fn q_texel(i: u32) -> vec4<u32> {
  return textureLoad(wq, vec2<u32>(i & 4095u, i >> 12u), 0);
}
