// Reading the KV pool's buffers of halves (blocks/kv_read_storage_f16.wgsl) through 64-bit words (shader-int64,
// Device.wide_loads: lavapipe), four halves a word: Mesa 22.3's llvmpipe loads a storage vector lane by lane and
// component by component, so a vec4<u64> brings a lane 32 bytes in the loop a vec4<u32> spends on 16.
// k_at / v_at / k_oct / v_oct / v_touch as there; k_hex(t) = vec4s 4t .. 4t + 3 of K (sixteen halves, one load).
@group(0) @binding({{KC}}) var<storage, read> kc: array<vec4<u64>>;  // [pool row][kv_heads * HD / 16]
@group(0) @binding({{VC}}) var<storage, read> vc: array<vec2<u64>>;  // [pool row][kv_heads * HD / 8]

fn kv_quad(w: u64) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(u32(w & 0xfffffffflu)), unpack2x16float(u32(w >> 32u)));
}
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
