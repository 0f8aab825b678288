// Reading the KV pool from storage buffers (GPUs): k_at(i) / v_at(i) = vec4 i of the layer's K / V,
// i = pool row * KR4 + vec4 index within the row (model/kv_pool.py).
@group(0) @binding({{KC}}) var<storage, read> kc: array<vec4<f32>>;  // [pool row][kv_heads * HD]
@group(0) @binding({{VC}}) var<storage, read> vc: array<vec4<f32>>;

fn k_at(i: u32) -> vec4<f32> { return kc[i]; }
fn v_at(i: u32) -> vec4<f32> { return vc[i]; }
fn v_touch(i: u32) -> u32 { return bitcast<u32>(vc[i].x); }  // a word of vec4 i (brings its line into cache)
