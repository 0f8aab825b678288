// The 4 bytes of v as unsigned values, byte 0 first (the 8-bit formats: Q8_0 and its texture layout).
fn ub4(v: u32) -> vec4<f32> {
  return vec4<f32>(f32(v & 255u), f32((v >> 8u) & 255u), f32((v >> 16u) & 255u), f32(v >> 24u));
}
