// The KV pool's storage buffers of halves read and written by one kernel (rope_attention_lanes.wgsl): as
// blocks/kv_read_storage_f16.wgsl (elements of eight halves: k_at / v_at, k_oct / v_oct, k_hex, v_touch) plus
// k_put / v_put, which write vec4 j as its two words of the element; kv_round(v) is v rounded as stored, so a
// token's own K and V from registers equal what later tokens read.
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec4<u32>>;
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec4<u32>>;

fn kv_halves(a: u32, b: u32) -> vec4<f32> { return vec4<f32>(unpack2x16float(a), unpack2x16float(b)); }
fn kv_pair(w: vec4<u32>) -> mat2x4<f32> { return mat2x4<f32>(kv_halves(w.x, w.y), kv_halves(w.z, w.w)); }
fn kv_pack(v: vec4<f32>) -> vec2<u32> { return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }
fn k_at(i: u32) -> vec4<f32> { return kv_pair(kc[i / 2u])[i & 1u]; }
fn v_at(i: u32) -> vec4<f32> { return kv_pair(vc[i / 2u])[i & 1u]; }
fn k_oct(t: u32) -> mat2x4<f32> { return kv_pair(kc[t]); }
fn v_oct(t: u32) -> mat2x4<f32> { return kv_pair(vc[t]); }
fn k_hex(t: u32) -> mat4x4<f32> {
  let a = kv_pair(kc[2u * t]);
  let b = kv_pair(kc[2u * t + 1u]);
  return mat4x4<f32>(a[0], a[1], b[0], b[1]);
}
fn v_touch(i: u32) -> u32 { return vc[i / 2u].x; }  // a word of vec4 i (brings its line into cache)
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
