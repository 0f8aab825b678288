// Weight formats Q5_0, Q5_1 and Q5_K (GGML) in textures (blocks/texture_quants, gpu_weights._q5_texels): two
// texels a 32-weight block (a Q5_K sub-block is a block of its own). Texel 0 holds the low nibbles in Q4_1's order
// (weight j the low nibble of byte j for j < 16, the high nibble of byte j - 16), texel 1 (the 32 high bits, f32 d,
// f32 m, 0): weight j is d * q_j + m with q_j = nibble + 16 * bit j -- Q5_0's d (q - 16) as m = -16 d, Q5_1's
// (d, m) widened, Q5_K's (d sc, -dmin m) as exact f32 products: gguf's values (test_quant_formats).
//! include blocks/texture_quants
const WB: u32 = 2u;

//! include blocks/nibbles

// q of weights 4j .. 4j + 3 from the block's texels: nibble and high bit joined as integers, one conversion a weight.
fn q5(t0: vec4<u32>, t1: vec4<u32>, j: u32) -> vec4<f32> {
  let s = select(0u, 4u, j >= 4u);
  let nib = (vec4<u32>(t0[j % 4u]) >> vec4<u32>(s, s + 8u, s + 16u, s + 24u)) & vec4<u32>(15u);
  let h = t1.x >> (4u * j);
  return vec4<f32>(nib | (vec4<u32>(h << 4u, h << 3u, h << 2u, h << 1u) & vec4<u32>(16u)));
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let t0 = q_texel(wb);
  let t1 = q_texel(wb + 1u);
  let s = q5(t0, t1, 0u) * x0 + q5(t0, t1, 1u) * x1 + q5(t0, t1, 2u) * x2 + q5(t0, t1, 3u) * x3
        + q5(t0, t1, 4u) * x4 + q5(t0, t1, 5u) * x5 + q5(t0, t1, 6u) * x6 + q5(t0, t1, 7u) * x7;
  return bitcast<f32>(t1.y) * (s.x + s.y + s.z + s.w) + bitcast<f32>(t1.z) * xsum;
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let t1 = q_texel(wb + 1u);
  return bitcast<f32>(t1.y) * q5(q_texel(wb), t1, j) + bitcast<f32>(t1.z);
}

// The token-tile matmul (matmul.wgsl): q of vec4 j, and (d, m).
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return q5(q_texel(wb), q_texel(wb + 1u), j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  let t1 = q_texel(wb + 1u);
  return vec2<f32>(bitcast<f32>(t1.y), bitcast<f32>(t1.z));
}
