// Weight format Q8_0 (GGML), repacked: each block of 32 weights is 9 words: 8 words
// of signed bytes (weight j in byte j), then the f16 scale d in the low half of the
// ninth word. Weight j is d * q_j.
const WB: u32 = 9u;

fn sb4(v: u32) -> vec4<f32> {
  let i = bitcast<i32>(v);
  return vec4<f32>(f32((i << 24u) >> 24u), f32((i << 16u) >> 24u), f32((i << 8u) >> 24u), f32(i >> 24u));
}

fn block_dot(wb: u32, x: array<vec4<f32>, 8>, xsum: f32) -> f32 {
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 8u; j++) {
    s += sb4(w[wb + j]) * x[j];
  }
  let d = unpack2x16float(w[wb + 8u]).x;
  return d * (s.x + s.y + s.z + s.w);
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  let d = unpack2x16float(w[wb + 8u]).x;
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = d * sb4(w[wb + j]);
  }
  return out;
}
