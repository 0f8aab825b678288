// The block functions of a texture format whose 32-weight block is one texel of nibbles in Q4_1's order (weight j
// the low nibble of byte j for j < 16, the high nibble of byte j - 16) and weight = d q + m with (d, m) from the
// format's dm_at (q4_1_tex, q4_k_tex).
//! include blocks/nibbles

// sum_j w_j * x_j over one block given its (d, m); xsum = sum_j x_j (the min term factors out).
fn block_dot_dm(wb: u32, dm: vec2<f32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
                x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  return dm.x * nib_dot(q_texel(wb), x0, x1, x2, x3, x4, x5, x6, x7) + dm.y * xsum;
}

// Weights 4j .. 4j + 3 of one block as f32 (embedding rows), as gguf computes them: d * q + m.
fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let dm = block_dm(wb);
  return dm.x * nib4(q_texel(wb)[j % 4u], (j / 4u) * 4u) + dm.y;
}

// The token-tile matmul (matmul.wgsl): raw values of vec4 j of a block from its texel t (fetched once for
// the 8 vec4s: model/shader_code.py tile_code), and (d, m).
fn block_q_t(t: vec4<u32>, j: u32) -> vec4<f32> {
  return nib4(t[j % 4u], select(0u, 4u, j >= 4u));
}
