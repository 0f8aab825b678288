// Weight format f16: each block of 32 weights is 16 words, two halves per word
// (weight 2i in the low half).
//! include blocks/storage_weights
const WB: u32 = 16u;

fn h4(i: u32) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(w[i]), unpack2x16float(w[i + 1u]));
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let s = h4(wb) * x0 + h4(wb + 2u) * x1 + h4(wb + 4u) * x2 + h4(wb + 6u) * x3
        + h4(wb + 8u) * x4 + h4(wb + 10u) * x5 + h4(wb + 12u) * x6 + h4(wb + 14u) * x7;
  return s.x + s.y + s.z + s.w;
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = h4(wb + 2u * j);
  }
  return out;
}

// The token-tile matmul (matmul.wgsl): vec4 j of a block, and (d, m) = (1, 0).
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return h4(wb + 2u * j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  return vec2<f32>(1.0, 0.0);
}
