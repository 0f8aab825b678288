// The KV pool's storage buffers of halves read and written by one kernel (rope_attention_lanes.wgsl) through 64-bit
// words (shader-int64, Device.wide_loads: lavapipe): as blocks/kv_read_storage_f16_u64.wgsl (k_hex: sixteen
// halves a load) plus k_put / v_put, which write vec4 j as one word; kv_round(v) is v rounded as stored.
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec4<u64>>;  // [pool row][kv_heads * HD / 16]
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec2<u64>>;  // [pool row][kv_heads * HD / 8]

fn kv_quad(w: u64) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(u32(w & 0xfffffffflu)), unpack2x16float(u32(w >> 32u)));
}
fn kv_word(v: vec4<f32>) -> u64 { return u64(pack2x16float(v.xy)) | (u64(pack2x16float(v.zw)) << 32u); }
fn k_at(i: u32) -> vec4<f32> { return kv_quad(kc[i / 4u][i % 4u]); }
fn v_at(i: u32) -> vec4<f32> { return kv_quad(vc[i / 2u][i % 2u]); }
fn k_hex(t: u32) -> mat4x4<f32> {
  let w = kc[t];
  return mat4x4<f32>(kv_quad(w.x), kv_quad(w.y), kv_quad(w.z), kv_quad(w.w));
}
fn k_oct(t: u32) -> mat2x4<f32> {
  let w = kc[t / 2u];
  let e = 2u * (t & 1u);
  return mat2x4<f32>(kv_quad(w[e]), kv_quad(w[e + 1u]));
}
fn v_oct(t: u32) -> mat2x4<f32> {
  let w = vc[t];
  return mat2x4<f32>(kv_quad(w.x), kv_quad(w.y));
}
fn v_touch(i: u32) -> u32 { return u32(vc[i / 2u].x & 0xfffffffflu); }  // a word of vec4 i (brings its line into cache)
fn k_put(j: u32, v: vec4<f32>) { kc[j / 4u][j % 4u] = kv_word(v); }
fn v_put(j: u32, v: vec4<f32>) { vc[j / 2u][j % 2u] = kv_word(v); }
fn kv_round(v: vec4<f32>) -> vec4<f32> { return kv_quad(kv_word(v)); }
