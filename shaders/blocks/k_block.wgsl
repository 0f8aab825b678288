// The block functions of Q4_K and Q5_K given their qv(g, j) (raw values of vec4 j of 32-weight block g)
// and sub_dm (blocks/k_scales): weight = (d * sc) * q - dmin * m, the scale and min factored out of
// the dot product; for the token-tile matmul (matmul.wgsl), block_q is qv and (d, m) = (d sc, -dmin m).
fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let dm = sub_dm(wb);
  let s = qv(wb, 0u) * x0 + qv(wb, 1u) * x1 + qv(wb, 2u) * x2 + qv(wb, 3u) * x3
        + qv(wb, 4u) * x4 + qv(wb, 5u) * x5 + qv(wb, 6u) * x6 + qv(wb, 7u) * x7;
  return dm.x * (s.x + s.y + s.z + s.w) - dm.y * xsum;
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let dm = sub_dm(wb);
  return dm.x * qv(wb, j) - dm.y;
}

fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return qv(wb, j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  let dm = sub_dm(wb);
  return vec2<f32>(dm.x, -dm.y);
}
