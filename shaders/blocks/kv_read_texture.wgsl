// Reading the KV pool from rgba32float textures (CPU adapters: on lavapipe a storage load is a loop
// over the lanes, a texel fetch a gather -- 2000 positions' K rows read in 0.26x the time with two
// rg32float fetches a vec4, and one rgba32float fetch takes about 0.6x of that again):
// k_at(i) / v_at(i) = vec4 i of the layer's K / V, i = pool row * KR4 + vec4 index, as texel i of
// KV_W texels a texture row (a multiple of the KV row: no KV row spans two texture rows).
@group(0) @binding({{KC}}) var kc: texture_2d<f32>;
@group(0) @binding({{VC}}) var vc: texture_2d<f32>;
const KV_W: u32 = {{KV_W}}u;

fn kv_texel(i: u32) -> vec2<u32> { return vec2<u32>(i % KV_W, i / KV_W); }
fn k_at(i: u32) -> vec4<f32> { return textureLoad(kc, kv_texel(i), 0); }
fn v_at(i: u32) -> vec4<f32> { return textureLoad(vc, kv_texel(i), 0); }
