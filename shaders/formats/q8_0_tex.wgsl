// Weight format Q8_0 (GGML) in textures (blocks/texture_weights): block i's 32 signed bytes are
// texels 2i and 2i + 1 of wq (WB = 2 texels a block), its scale d (GGUF's f16, widened to f32
// bits: exact) the block's scale word. Weight j is d * q_j, the values of formats/q8_0.wgsl. The dot
// product flips each byte's sign bit (q + 128) and subtracts 128 * sum(x).
//! include blocks/texture_weights
const SCALE_BLOCKS: u32 = 1u;  // blocks a scale word
const WB: u32 = 2u;

//! include blocks/bytes

// (d, m) of a scale word: weight = d (q + 128) + m, m = -128 d.
fn dm_at(word: u32, row: u32, b: u32) -> vec2<f32> {
  let d = bitcast<f32>(word);
  return vec2<f32>(d, -128.0 * d);
}

fn block_dot_dm(wb: u32, dm: vec2<f32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
                x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let a = q_texel(wb) ^ vec4<u32>(0x80808080u);
  let b = q_texel(wb + 1u) ^ vec4<u32>(0x80808080u);
  let s = ub4(a.x) * x0 + ub4(a.y) * x1 + ub4(a.z) * x2 + ub4(a.w) * x3
        + ub4(b.x) * x4 + ub4(b.y) * x5 + ub4(b.z) * x6 + ub4(b.w) * x7;
  return dm.x * (s.x + s.y + s.z + s.w) + dm.y * xsum;
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  return bitcast<f32>(scale_word(wb)) * (ub4(q_texel(wb + j / 4u)[j % 4u] ^ 0x80808080u) - 128.0);
}

// The token-tile matmul (matmul.wgsl): raw values of vec4 j of a block as unsigned bytes q + 128 from
// the block's texel j / 4 (t: each texel fetched once for its 4 vec4s, model/shader_code.py tile_code),
// and (d, m) with weight = d * (q + 128) + m, m = -128 d.
fn block_q_t(t: vec4<u32>, j: u32) -> vec4<f32> {
  return ub4(t[j % 4u] ^ 0x80808080u);
}
