// rope_kv_seqs.wgsl for KV textures of halves (blocks/kv_write_texture_f16.wgsl), whose texel holds eight
// values: one invocation per (token, eight rows: two quads), k and v written a whole texel at a time.
//! include blocks/rope_kv_seqs_io
const P: u32 = (QR + 2u * KR) / 8u;  // row octets per token (QR, KR: multiples of HD, itself of 8)

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let w = seq_row(gid);
  if (!w.live) { return; }
  var lo = qkv[w.tok * 2u * P + 2u * w.p];
  var hi = qkv[w.tok * 2u * P + 2u * w.p + 1u];
  let r = w.p * 8u;
  if (r < QR + KR) {
    lo = rope_quad(lo, w.pos, r);
    hi = rope_quad(hi, w.pos, r + 4u);
  }
  if (r < QR) {
    q[w.tok * (QR / 4u) + 2u * w.p] = lo;
    q[w.tok * (QR / 4u) + 2u * w.p + 1u] = hi;
    return;
  }
  let k = r >= QR + KR;  // v rows, else k rows
  let at = kv_row(w.tb, w.pos) * (KR / 8u) + (select(r - QR, r - QR - KR, k)) / 8u;
  if (k) { v_put8(at, lo, hi); } else { k_put8(at, lo, hi); }
}
