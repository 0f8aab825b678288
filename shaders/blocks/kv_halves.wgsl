// Reading K and V of halves from the pool's buffers as elements of eight halves (kc, vc: array<vec4<u32>>, declared
// by the including snippet, read-only or read-write): vec4 i is two words of two f16 each (pack2x16float, core
// WGSL), element t holds vec4s 2t and 2t + 1. k_at(i) / v_at(i) = vec4 i; k_oct(t) / v_oct(t) = both vec4s of
// element t (one 16-byte load for eight values); k_hex(t) = vec4s 4t .. 4t + 3 (blocks/kv_halves_u64.wgsl: one
// load); v_touch(i) = a word of vec4 i (brings its cache line in).
fn kv_halves(a: u32, b: u32) -> vec4<f32> { return vec4<f32>(unpack2x16float(a), unpack2x16float(b)); }
fn kv_pair(w: vec4<u32>) -> mat2x4<f32> { return mat2x4<f32>(kv_halves(w.x, w.y), kv_halves(w.z, w.w)); }
fn kv_one(w: vec4<u32>, i: u32) -> vec4<f32> {
  return select(kv_halves(w.x, w.y), kv_halves(w.z, w.w), (i & 1u) == 1u);
}
fn k_at(i: u32) -> vec4<f32> { return kv_one(kc[i / 2u], i); }
fn v_at(i: u32) -> vec4<f32> { return kv_one(vc[i / 2u], i); }
fn k_oct(t: u32) -> mat2x4<f32> { return kv_pair(kc[t]); }
fn v_oct(t: u32) -> mat2x4<f32> { return kv_pair(vc[t]); }
fn k_hex(t: u32) -> mat4x4<f32> {
  let a = kv_pair(kc[2u * t]);
  let b = kv_pair(kc[2u * t + 1u]);
  return mat4x4<f32>(a[0], a[1], b[0], b[1]);
}
fn v_touch(i: u32) -> u32 { return vc[i / 2u].x; }
