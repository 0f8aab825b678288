// Bits j, j+1, j+2, j+3 of a 32-bit qh word, times 16: the fifth bits of Q5_0 / Q5_1 weights.
fn hi4(qh: u32, j: u32) -> vec4<f32> {
  return 16.0 * vec4<f32>(f32((qh >> j) & 1u), f32((qh >> (j + 1u)) & 1u),
                          f32((qh >> (j + 2u)) & 1u), f32((qh >> (j + 3u)) & 1u));
}
