// The block functions of the float formats (F32, F16, BF16) given their wv(wb, j): weights 4j .. 4j + 3
// of the 32-weight block at word wb, as stored (no scale), so for the token-tile matmul (matmul.wgsl)
// block_q is wv and (d, m) = (1, 0).
fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let s = wv(wb, 0u) * x0 + wv(wb, 1u) * x1 + wv(wb, 2u) * x2 + wv(wb, 3u) * x3
        + wv(wb, 4u) * x4 + wv(wb, 5u) * x5 + wv(wb, 6u) * x6 + wv(wb, 7u) * x7;
  return s.x + s.y + s.z + s.w;
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  return wv(wb, j);
}

fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return wv(wb, j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  return vec2<f32>(1.0, 0.0);
}
