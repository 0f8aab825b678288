// Weight format Q4_1 (GGML), read as GGUF stores it: each block of 32 weights is 20
// bytes = 5 words: (d, m) as two f16, then 4 words of nibbles. Weight j of the block is
// d * q_j + m, with q_j the low nibble of byte j for j < 16 and the high nibble of
// byte j - 16 otherwise.
// x0..x7 are the block's 32 inputs as vec4s (plain parameters, not an array: arrays
// passed by value stay in memory on lavapipe and cost 30-50% of the matvec).
//! include blocks/storage_weights
const WB: u32 = 5u;

//! include blocks/nibbles

// sum_j w_j * x_j over one block; xsum = sum_j x_j (the min term factors out).
fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let v0 = w[wb + 1u];
  let v1 = w[wb + 2u];
  let v2 = w[wb + 3u];
  let v3 = w[wb + 4u];
  let dm = unpack2x16float(w[wb]);
  return dm.x * nib_dot(vec4<u32>(v0, v1, v2, v3), x0, x1, x2, x3, x4, x5, x6, x7) + dm.y * xsum;
}

// Weights 4j .. 4j + 3 of one block as f32 (embedding rows), as gguf computes them: d * q + m.
fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let dm = unpack2x16float(w[wb]);
  return dm.x * nib4(w[wb + 1u + j % 4u], (j / 4u) * 4u) + dm.y;
}

// The token-tile matmul (matmul.wgsl): raw values of vec4 j of a block (decoded once per
// row and block, used for every token of the tile) and (d, m) with weight = d * q + m.
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return nib4(w[wb + 1u + j % 4u], select(0u, 4u, j >= 4u));
}

fn block_dm(wb: u32) -> vec2<f32> {
  return unpack2x16float(w[wb]);
}
