// Reading the KV pool from rgba32uint textures of halves (load_model(kv_dtype="f16") on CPU adapters): texel t
// holds vec4s 2t and 2t + 1 as four words of two f16 each (pack2x16float). k_at(i) / v_at(i) = vec4 i as in
// blocks/kv_read_texture.wgsl (a fetch a vec4); k_oct(t) / v_oct(t) = both vec4s of texel t (one fetch for
// eight values: lavapipe's cost is the fetch, so the decode attention reads whole texels).
@group(0) @binding({{KC}}) var kc: texture_2d<u32>;
@group(0) @binding({{VC}}) var vc: texture_2d<u32>;
const KV_W: u32 = {{KV_W}}u;  // texels a texture row

fn kv_texel(t: u32) -> vec2<u32> { return vec2<u32>(t % KV_W, t / KV_W); }
fn kv_halves(a: u32, b: u32) -> vec4<f32> { return vec4<f32>(unpack2x16float(a), unpack2x16float(b)); }
fn kv_pair(w: vec4<u32>) -> mat2x4<f32> { return mat2x4<f32>(kv_halves(w.x, w.y), kv_halves(w.z, w.w)); }
fn kv_one(w: vec4<u32>, i: u32) -> vec4<f32> {
  return select(kv_halves(w.x, w.y), kv_halves(w.z, w.w), (i & 1u) == 1u);
}
fn k_at(i: u32) -> vec4<f32> { return kv_one(textureLoad(kc, kv_texel(i / 2u), 0), i); }
fn v_at(i: u32) -> vec4<f32> { return kv_one(textureLoad(vc, kv_texel(i / 2u), 0), i); }
fn k_oct(t: u32) -> mat2x4<f32> { return kv_pair(textureLoad(kc, kv_texel(t), 0)); }
fn v_oct(t: u32) -> mat2x4<f32> { return kv_pair(textureLoad(vc, kv_texel(t), 0)); }
