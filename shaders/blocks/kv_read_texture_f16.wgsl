// Reading the KV pool from rg32uint textures of halves (load_model(kv_dtype="f16") on CPU adapters): texel i
// holds vec4 i as two words of two f16 (pack2x16float); k_at(i) / v_at(i) as in blocks/kv_read_texture.wgsl.
@group(0) @binding({{KC}}) var kc: texture_2d<u32>;
@group(0) @binding({{VC}}) var vc: texture_2d<u32>;
const KV_W: u32 = {{KV_W}}u;

fn kv_texel(i: u32) -> vec2<u32> { return vec2<u32>(i % KV_W, i / KV_W); }
fn kv_halves(w: vec4<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }
fn k_at(i: u32) -> vec4<f32> { return kv_halves(textureLoad(kc, kv_texel(i), 0)); }
fn v_at(i: u32) -> vec4<f32> { return kv_halves(textureLoad(vc, kv_texel(i), 0)); }
