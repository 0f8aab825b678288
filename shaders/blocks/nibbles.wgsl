// The 4-bit field at bit s of each byte of v, as a vec4 (the GGML 4- and 5-bit formats).
fn nib4(v: u32, s: u32) -> vec4<f32> {
  return vec4<f32>(f32((v >> s) & 15u), f32((v >> (s + 8u)) & 15u),
                   f32((v >> (s + 16u)) & 15u), f32((v >> (s + 24u)) & 15u));
}
