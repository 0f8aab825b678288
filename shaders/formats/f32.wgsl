// Weight format f32: each block of 32 weights is 32 words.
const WB: u32 = 32u;

fn f4(i: u32) -> vec4<f32> {
  return bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}

fn block_dot(wb: u32, x: array<vec4<f32>, 8>, xsum: f32) -> f32 {
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 8u; j++) {
    s += f4(wb + 4u * j) * x[j];
  }
  return s.x + s.y + s.z + s.w;
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = f4(wb + 4u * j);
  }
  return out;
}
