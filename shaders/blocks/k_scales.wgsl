// The 6-bit scales and mins of a Q4_K / Q5_K super-block (SV vec4s of words, blocks/storage_vec4s): f16 d and
// dmin in word 0 of its first vec4, then 12 bytes (words 1..3) packing 8 scales and 8 mins (llama.cpp's
// get_scale_min_k4) -- one load for all of them.
fn scale_byte(h: vec4<u32>, k: u32) -> u32 {
  return (h[1u + k / 4u] >> (8u * (k % 4u))) & 255u;
}

// (d * sc_s, dmin * m_s) of sub-block s = g % 8 of the super-block g / 8 (g: the 32-weight block).
fn sub_dm(g: u32) -> vec2<f32> {
  let h = w4[(g / 8u) * SV];
  let s = g % 8u;
  let dd = unpack2x16float(h.x);
  var sc: u32;
  var m: u32;
  if (s < 4u) {
    sc = scale_byte(h, s) & 63u;
    m = scale_byte(h, s + 4u) & 63u;
  } else {
    let e = scale_byte(h, s + 4u);
    sc = (e & 15u) | ((scale_byte(h, s - 4u) >> 6u) << 4u);
    m = (e >> 4u) | ((scale_byte(h, s) >> 6u) << 4u);
  }
  return vec2<f32>(dd.x * f32(sc), dd.y * f32(m));
}
