// Weight format Q8_0 (GGML), repacked: each block of 32 weights is 9 words: 8 words
// of signed bytes (weight j in byte j), then the f16 scale d in the low half of the
// ninth word. Weight j is d * q_j. The dot product flips the sign bit of every byte
// (q + 128, an unsigned byte, extracted like a nibble) and subtracts 128 * sum(x):
// cheaper than sign-extending each byte.
const WB: u32 = 9u;

fn ub4(v: u32) -> vec4<f32> {
  return vec4<f32>(f32(v & 255u), f32((v >> 8u) & 255u), f32((v >> 16u) & 255u), f32(v >> 24u));
}

fn sb4(v: u32) -> vec4<f32> {
  return ub4(v ^ 0x80808080u) - 128.0;
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let s = ub4(w[wb] ^ 0x80808080u) * x0 + ub4(w[wb + 1u] ^ 0x80808080u) * x1
        + ub4(w[wb + 2u] ^ 0x80808080u) * x2 + ub4(w[wb + 3u] ^ 0x80808080u) * x3
        + ub4(w[wb + 4u] ^ 0x80808080u) * x4 + ub4(w[wb + 5u] ^ 0x80808080u) * x5
        + ub4(w[wb + 6u] ^ 0x80808080u) * x6 + ub4(w[wb + 7u] ^ 0x80808080u) * x7;
  let d = unpack2x16float(w[wb + 8u]).x;
  return d * ((s.x + s.y + s.z + s.w) - 128.0 * xsum);
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  let d = unpack2x16float(w[wb + 8u]).x;
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = d * sb4(w[wb + j]);
  }
  return out;
}

// The token-tile matmul (matmul.wgsl): raw values of vec4 j of a block as unsigned bytes
// q + 128, and (d, m) with weight = d * (q + 128) + m, m = -128 d.
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return ub4(w[wb + j] ^ 0x80808080u);
}

fn block_dm(wb: u32) -> vec2<f32> {
  let d = unpack2x16float(w[wb + 8u]).x;
  return vec2<f32>(d, -128.0 * d);
}
