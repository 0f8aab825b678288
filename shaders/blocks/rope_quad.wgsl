// RoPE on four rows r .. r + 3 of a token at position pos, in adjacent-pair order (llama.cpp's layout:
// rows (x, y) and (z, w) rotate together), from the kernel's `rope` table read as vec4s: [position][HD / 4]
// (cos, sin, cos, sin). Used by the KV writers, which write a whole vec4 (a KV texture's texel).
fn rope_quad(v: vec4<f32>, pos: u32, r: u32) -> vec4<f32> {
  let cs = rope[pos * (HD / 4u) + (r % HD) / 4u];
  return vec4<f32>(v.x * cs.x - v.y * cs.y, v.y * cs.x + v.x * cs.y, v.z * cs.z - v.w * cs.w, v.w * cs.z + v.z * cs.w);
}
