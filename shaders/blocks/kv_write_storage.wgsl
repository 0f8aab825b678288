// Writing the KV pool's storage buffers: k_put(j, v) / v_put(j, v) store vec4 j of the layer's
// K / V, j = pool row * KR4 + vec4 index within the row (model/kv_pool.py), as k_at / v_at read it.
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec4<f32>>;
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec4<f32>>;

fn k_put(j: u32, v: vec4<f32>) { kc[j] = v; }
fn v_put(j: u32, v: vec4<f32>) { vc[j] = v; }
