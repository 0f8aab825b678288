// Weight format f16: each block of 32 weights is 16 words, two halves per word
// (weight 2i in the low half).
const WB: u32 = 16u;

fn h4(a: u32, b: u32) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

fn block_dot(wb: u32, x: array<vec4<f32>, 8>, xsum: f32) -> f32 {
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 8u; j++) {
    s += h4(w[wb + 2u * j], w[wb + 2u * j + 1u]) * x[j];
  }
  return s.x + s.y + s.z + s.w;
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = h4(w[wb + 2u * j], w[wb + 2u * j + 1u]);
  }
  return out;
}
