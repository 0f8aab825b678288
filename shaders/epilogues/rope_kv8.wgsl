// epilogues/rope_kv.wgsl for KV textures of halves (blocks/kv_write_texture_f16.wgsl), whose texel holds
// eight values: called per eight rows (epilogue8: r a multiple of 8, as QR, KR and HD are), each quad
// rotated as there, k and v written a whole texel at a time.
//! include blocks/rope_kv_io

fn epilogue8(t: u32, r: u32, a: f32, b: f32, c: f32, d: f32, e: f32, f: f32, g: f32, h: f32) {
  let at = token_at(t);  // (its page-table row, its position)
  let pos = at.y;
  var lo = vec4<f32>(a, b, c, d);
  var hi = vec4<f32>(e, f, g, h);
  if (r < QR + KR) {
    lo = rope_quad(lo, pos, r);
    hi = rope_quad(hi, pos, r + 4u);
  }
  if (r < QR) {
    q[(t * QR + r) / 4u] = lo;
    q[(t * QR + r) / 4u + 1u] = hi;
  } else if (r < QR + KR) {
    k_put8((kv_row(at.x, pos) * KR + r - QR) / 8u, lo, hi);
  } else {
    v_put8((kv_row(at.x, pos) * KR + r - QR - KR) / 8u, lo, hi);
  }
}
