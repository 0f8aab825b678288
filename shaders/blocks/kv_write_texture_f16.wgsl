// Writing the KV pool's rg32uint textures of halves (blocks/kv_read_texture_f16.wgsl): vec4 j is texel j,
// rounded to f16 (pack2x16float: to nearest even).
@group(0) @binding({{KC}}) var kc: texture_storage_2d<rg32uint, write>;
@group(0) @binding({{VC}}) var vc: texture_storage_2d<rg32uint, write>;
const KV_W: u32 = {{KV_W}}u;

fn kv_pack(v: vec4<f32>) -> vec4<u32> { return vec4<u32>(pack2x16float(v.xy), pack2x16float(v.zw), 0u, 0u); }
fn k_put(j: u32, v: vec4<f32>) { textureStore(kc, vec2<u32>(j % KV_W, j / KV_W), kv_pack(v)); }
fn v_put(j: u32, v: vec4<f32>) { textureStore(vc, vec2<u32>(j % KV_W, j / KV_W), kv_pack(v)); }
