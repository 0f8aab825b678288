// The KV pool's storage buffers of halves read and written by one kernel (rope_attention_lanes.wgsl): read as
// blocks/kv_read_storage_f16.wgsl (blocks/kv_halves.wgsl) plus k_put / v_put, which write vec4 j as its two
// words of the element; kv_round(v) is v rounded as stored, so a token's own K and V from registers equal what
// later tokens read.
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec4<u32>>;
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec4<u32>>;
//! include blocks/kv_halves

fn kv_pack(v: vec4<f32>) -> vec2<u32> { return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }
fn k_put(j: u32, v: vec4<f32>) {
  let w = kv_pack(v);
  kc[j / 2u][2u * (j & 1u)] = w.x;
  kc[j / 2u][2u * (j & 1u) + 1u] = w.y;
}
fn v_put(j: u32, v: vec4<f32>) {
  let w = kv_pack(v);
  vc[j / 2u][2u * (j & 1u)] = w.x;
  vc[j / 2u][2u * (j & 1u) + 1u] = w.y;
}
fn kv_round(v: vec4<f32>) -> vec4<f32> { let w = kv_pack(v); return kv_halves(w.x, w.y); }
