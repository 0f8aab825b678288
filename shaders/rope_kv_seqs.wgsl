// RoPE + KV-cache write for the sequences of a batched pass, several per dispatch. The QKV
// matmul ran over every token of the pass (rows [q | k | v], q and k in adjacent-pair order
// as in epilogues/rope_kv.wgsl); here one invocation per (token, row quad: two pairs), grid y =
// the sequence, rotates q and k pairs at the sequence's positions (its length + t), writes q
// to its buffer and k, v into that sequence's KV pages (through its page-table row, word
// seqs[i].z of `tables`) a vec4 at a time (a KV texture's texel is written whole).
//! include blocks/rope_kv_seqs_io
const P: u32 = (QR + 2u * KR) / 4u;  // row quads per token (QR, KR: multiples of HD, itself of 4)

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let w = seq_row(gid);
  if (!w.live) { return; }
  var v = qkv[w.tok * P + w.p];
  let r = w.p * 4u;
  if (r < QR + KR) { v = rope_quad(v, w.pos, r); }
  if (r < QR) {
    q[w.tok * (QR / 4u) + w.p] = v;
    return;
  }
  let k = r >= QR + KR;  // a v row, else a k row
  let at = kv_row(w.tb, w.pos) * (KR / 4u) + (select(r - QR, r - QR - KR, k)) / 4u;
  if (k) { v_put(at, v); } else { k_put(at, v); }
}
