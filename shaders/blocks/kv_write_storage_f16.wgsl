// Writing the KV pool's storage buffers of halves (blocks/kv_read_storage_f16.wgsl): k_put(j, v) /
// v_put(j, v) store vec4 j of the layer's K / V rounded to f16 (pack2x16float).
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec2<u32>>;
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec2<u32>>;

fn kv_pack(v: vec4<f32>) -> vec2<u32> { return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }
fn k_put(j: u32, v: vec4<f32>) { kc[j] = kv_pack(v); }
fn v_put(j: u32, v: vec4<f32>) { vc[j] = kv_pack(v); }
