// Writing the KV pool's storage buffers: k_put(j, v) / v_put(j, v) store value pair j of the layer's
// K / V, j = pool row * KR / 2 + pair index within the row (model/kv_pool.py).
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec2<f32>>;
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec2<f32>>;

fn k_put(j: u32, v: vec2<f32>) { kc[j] = v; }
fn v_put(j: u32, v: vec2<f32>) { vc[j] = v; }
