// Reading K and V of halves from the pool's buffers through 64-bit words (shader-int64; kc: array<vec4<u64>>,
// vc: array<vec2<u64>>, declared by the including snippet, read-only or read-write), four halves a word: the
// functions of blocks/kv_halves.wgsl, with k_hex(t) = vec4s 4t .. 4t + 3 of K in one 32-byte load.
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
fn v_touch(i: u32) -> u32 { return u32(vc[i / 2u].x & 0xfffffffflu); }
