// Weight format BF16 (GGUF BF16, uploaded as stored): each block of 32 weights is 16
// words, two bfloat16 per word (weight 2i in the low half). A bfloat16 is the high half
// of an f32, so widening is a shift: the values equal gguf's dequantization bit for bit.
//! include blocks/storage_weights
const WB: u32 = 16u;

fn b4(i: u32) -> vec4<f32> {
  let a = w[i];
  let b = w[i + 1u];
  return bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xFFFF0000u, b << 16u, b & 0xFFFF0000u));
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let s = b4(wb) * x0 + b4(wb + 2u) * x1 + b4(wb + 4u) * x2 + b4(wb + 6u) * x3
        + b4(wb + 8u) * x4 + b4(wb + 10u) * x5 + b4(wb + 12u) * x6 + b4(wb + 14u) * x7;
  return s.x + s.y + s.z + s.w;
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = b4(wb + 2u * j);
  }
  return out;
}

// The token-tile matmul (matmul.wgsl): vec4 j of a block, and (d, m) = (1, 0).
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return b4(wb + 2u * j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  return vec2<f32>(1.0, 0.0);
}
