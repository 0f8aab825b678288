// Weight format Q4_1 (GGML), repacked for 4-byte loads: each block of 32 weights is
// 5 words: 4 words of nibbles, then (d, m) as two f16. Weight j of the block is
// d * q_j + m, with q_j the low nibble of byte j for j < 16 and the high nibble of
// byte j - 16 otherwise (the GGML order, kept so the values are bit-identical).
const WB: u32 = 5u;

fn nib4(v: u32, s: u32) -> vec4<f32> {
  return vec4<f32>(f32((v >> s) & 15u), f32((v >> (s + 8u)) & 15u),
                   f32((v >> (s + 16u)) & 15u), f32((v >> (s + 24u)) & 15u));
}

// sum_j w_j * x_j over one block; xsum = sum_j x_j (the min term factors out).
fn block_dot(wb: u32, x: array<vec4<f32>, 8>, xsum: f32) -> f32 {
  var s = vec4<f32>(0.0);
  for (var j = 0u; j < 4u; j++) {
    let v = w[wb + j];
    s += nib4(v, 0u) * x[j] + nib4(v, 4u) * x[j + 4u];
  }
  let dm = unpack2x16float(w[wb + 4u]);
  return dm.x * (s.x + s.y + s.z + s.w) + dm.y * xsum;
}

// The 32 weights of one block as f32.
fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  let dm = unpack2x16float(w[wb + 4u]);
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 4u; j++) {
    let v = w[wb + j];
    out[j] = dm.x * nib4(v, 0u) + dm.y;
    out[j + 4u] = dm.x * nib4(v, 4u) + dm.y;
  }
  return out;
}
