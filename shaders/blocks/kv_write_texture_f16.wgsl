// Writing the KV pool's rgba32uint textures of halves (blocks/kv_read_texture_f16.wgsl): texel t is vec4s 2t
// and 2t + 1, rounded to f16 (pack2x16float: to nearest even) and written whole, so the writers
// (epilogues/rope_kv8.wgsl, rope_kv_seqs8.wgsl) hand over eight values at a time.
@group(0) @binding({{KC}}) var kc: texture_storage_2d<rgba32uint, write>;
@group(0) @binding({{VC}}) var vc: texture_storage_2d<rgba32uint, write>;
const KV_W: u32 = {{KV_W}}u;

fn kv_pack8(a: vec4<f32>, b: vec4<f32>) -> vec4<u32> {
  return vec4<u32>(pack2x16float(a.xy), pack2x16float(a.zw), pack2x16float(b.xy), pack2x16float(b.zw));
}
fn k_put8(t: u32, a: vec4<f32>, b: vec4<f32>) { textureStore(kc, vec2<u32>(t % KV_W, t / KV_W), kv_pack8(a, b)); }
fn v_put8(t: u32, a: vec4<f32>, b: vec4<f32>) { textureStore(vc, vec2<u32>(t % KV_W, t / KV_W), kv_pack8(a, b)); }
