// The 6-bit scales and mins of a Q4_K / Q5_K super-block at word `base`: f16 d and dmin in word
// base, then 12 bytes packing 8 scales and 8 mins (llama.cpp's get_scale_min_k4).
fn scale_byte(base: u32, k: u32) -> u32 {
  return (w[base + 1u + k / 4u] >> (8u * (k % 4u))) & 255u;
}

// (d * sc_s, dmin * m_s) of sub-block s of the super-block at word `base`.
fn sub_dm(base: u32, s: u32) -> vec2<f32> {
  let dd = unpack2x16float(w[base]);
  var sc: u32;
  var m: u32;
  if (s < 4u) {
    sc = scale_byte(base, s) & 63u;
    m = scale_byte(base, s + 4u) & 63u;
  } else {
    let e = scale_byte(base, s + 4u);
    sc = (e & 15u) | ((scale_byte(base, s - 4u) >> 6u) << 4u);
    m = (e >> 4u) | ((scale_byte(base, s) >> 6u) << 4u);
  }
  return vec2<f32>(dd.x * f32(sc), dd.y * f32(m));
}
