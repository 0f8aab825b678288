// Weight format f32: each block of 32 weights is 32 words.
//! include blocks/storage_weights
const WB: u32 = 32u;

fn f4(i: u32) -> vec4<f32> {
  return bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let s = f4(wb) * x0 + f4(wb + 4u) * x1 + f4(wb + 8u) * x2 + f4(wb + 12u) * x3
        + f4(wb + 16u) * x4 + f4(wb + 20u) * x5 + f4(wb + 24u) * x6 + f4(wb + 28u) * x7;
  return s.x + s.y + s.z + s.w;
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = f4(wb + 4u * j);
  }
  return out;
}

// The token-tile matmul (matmul.wgsl): vec4 j of a block, and (d, m) = (1, 0).
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return f4(wb + 4u * j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  return vec2<f32>(1.0, 0.0);
}
