// Weight format Q6_K (GGML) in textures (blocks/texture_quants, gpu_weights._q6_k_texels): two texels a 32-weight
// sub-block. Texel 0 holds the low nibbles in Q4_1's order (weight j the low nibble of byte j for j < 16, the high
// nibble of byte j - 16), texel 1 (the 2-bit highs of weights 0..15, of 16..31, f32 d sc of weights 0..15, of
// 16..31). Weight j is (d sc) * (q_j - 32), q_j = nibble + 16 * high: gguf's values and order (formats/q6_k.wgsl).
//! include blocks/texture_quants
const WB: u32 = 2u;

//! include blocks/nibbles

// q - 32 (-32..31) of weights 4j .. 4j + 3 from the block's texels: nibble and high bits joined as integers, one
// conversion a weight (an 8192 x 2048 decode matvec 7.6 vs 9.4 ms adding 16 * f32(high) to f32(nibble), runs apart).
fn q6(t0: vec4<u32>, t1: vec4<u32>, j: u32) -> vec4<f32> {
  let s = select(0u, 4u, j >= 4u);
  let nib = (vec4<u32>(t0[j % 4u]) >> vec4<u32>(s, s + 8u, s + 16u, s + 24u)) & vec4<u32>(15u);
  let h = t1[j / 4u] >> (8u * (j % 4u));
  let high = vec4<u32>(h << 4u, h << 2u, h, h >> 2u) & vec4<u32>(48u);
  return vec4<f32>(nib | high) - 32.0;
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let t0 = q_texel(wb);
  let t1 = q_texel(wb + 1u);
  let lo = q6(t0, t1, 0u) * x0 + q6(t0, t1, 1u) * x1 + q6(t0, t1, 2u) * x2 + q6(t0, t1, 3u) * x3;
  let hi = q6(t0, t1, 4u) * x4 + q6(t0, t1, 5u) * x5 + q6(t0, t1, 6u) * x6 + q6(t0, t1, 7u) * x7;
  return bitcast<f32>(t1.z) * (lo.x + lo.y + lo.z + lo.w) + bitcast<f32>(t1.w) * (hi.x + hi.y + hi.z + hi.w);
}

// d sc of weights 4j .. 4j + 3.
fn dsc6(t1: vec4<u32>, j: u32) -> f32 {
  return bitcast<f32>(select(t1.z, t1.w, j >= 4u));
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let t1 = q_texel(wb + 1u);
  return dsc6(t1, j) * q6(q_texel(wb), t1, j);
}

// The token-tile matmul (matmul.wgsl): two scales a block do not factor out, so block_q returns the scaled values
// and (d, m) = (1, 0).
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  let t1 = q_texel(wb + 1u);
  return dsc6(t1, j) * q6(q_texel(wb), t1, j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  return vec2<f32>(1.0, 0.0);
}
