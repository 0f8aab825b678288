// Writing the KV pool's rgba32float textures (blocks/kv_read_texture.wgsl): vec4 j is texel j.
@group(0) @binding({{KC}}) var kc: texture_storage_2d<rgba32float, write>;
@group(0) @binding({{VC}}) var vc: texture_storage_2d<rgba32float, write>;
const KV_W: u32 = {{KV_W}}u;

fn k_put(j: u32, v: vec4<f32>) { textureStore(kc, vec2<u32>(j % KV_W, j / KV_W), v); }
fn v_put(j: u32, v: vec4<f32>) { textureStore(vc, vec2<u32>(j % KV_W, j / KV_W), v); }
