// Writing the KV pool's rg32float textures (blocks/kv_read_texture.wgsl): pair j is texel j.
@group(0) @binding({{KC}}) var kc: texture_storage_2d<rg32float, write>;
@group(0) @binding({{VC}}) var vc: texture_storage_2d<rg32float, write>;
const KV_W: u32 = {{KV_W}}u;

fn k_put(j: u32, v: vec2<f32>) { textureStore(kc, vec2<u32>(j % KV_W, j / KV_W), vec4<f32>(v, 0.0, 0.0)); }
fn v_put(j: u32, v: vec2<f32>) { textureStore(vc, vec2<u32>(j % KV_W, j / KV_W), vec4<f32>(v, 0.0, 0.0)); }
