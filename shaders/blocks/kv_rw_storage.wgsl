// The KV pool's storage buffers read and written by one kernel (rope_attention_lanes.wgsl): k_at / v_at
// as blocks/kv_read_storage.wgsl, k_put / v_put as blocks/kv_write_storage.wgsl, and kv_round(v) = v as
// stored (here: v itself).
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec4<f32>>;  // [pool row][kv_heads * HD]
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec4<f32>>;

fn k_at(i: u32) -> vec4<f32> { return kc[i]; }
fn v_at(i: u32) -> vec4<f32> { return vc[i]; }
fn k_put(j: u32, v: vec4<f32>) { kc[j] = v; }
fn v_put(j: u32, v: vec4<f32>) { vc[j] = v; }
fn kv_round(v: vec4<f32>) -> vec4<f32> { return v; }
fn v_touch(i: u32) -> u32 { return bitcast<u32>(vc[i].x); }  // a word of vec4 i (brings its line into cache)
