// Reading the KV pool from rg32float textures (CPU adapters: on lavapipe a storage load is a loop
// over the lanes, a texel fetch a gather -- 2000 positions' K rows read in 0.26x the time):
// k_at(i) / v_at(i) = vec4 i of the layer's K / V, i = pool row * KR4 + vec4 index, as texels 2i
// and 2i + 1 of KV_W texels a texture row (a multiple of the KV row: no vec4 spans two rows).
@group(0) @binding({{KC}}) var kc: texture_2d<f32>;
@group(0) @binding({{VC}}) var vc: texture_2d<f32>;
const KV_W: u32 = {{KV_W}}u;

fn kv_texel(j: u32) -> vec2<u32> { return vec2<u32>(j % KV_W, j / KV_W); }
fn k_at(i: u32) -> vec4<f32> {
  let c = kv_texel(2u * i);
  return vec4<f32>(textureLoad(kc, c, 0).xy, textureLoad(kc, c + vec2<u32>(1u, 0u), 0).xy);
}
fn v_at(i: u32) -> vec4<f32> {
  let c = kv_texel(2u * i);
  return vec4<f32>(textureLoad(vc, c, 0).xy, textureLoad(vc, c + vec2<u32>(1u, 0u), 0).xy);
}
