// RoPE + KV-cache write for the sequences of a batched pass, several per dispatch. The QKV
// matmul ran over every token of the pass (rows [q | k | v], q and k in adjacent-pair order
// as in epilogues/rope_kv.wgsl); here one invocation per (token, row quad: two pairs), grid y =
// the sequence, rotates q and k pairs at the sequence's positions (its length + t), writes q
// to its buffer and k, v into that sequence's KV pages (through its page-table row, word
// seqs[i].z of `tables`) a vec4 at a time (a KV texture's texel is written whole).
@group(0) @binding(0) var<storage, read> qkv: array<vec4<f32>>;       // [T][(QR + 2 KR) / 4] quads
@group(0) @binding(1) var<storage, read_write> q: array<vec4<f32>>;   // [T][QR / 4]
@group(0) @binding(2) var<storage, read> rope: array<vec4<f32>>;      // [position][HD / 4] (cos, sin, cos, sin)
@group(0) @binding(3) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
{{KV_WRITE}}
@group(0) @binding(6) var<storage, read> tables: array<u32>;  // page tables (blocks/pages.wgsl)

const QR: u32 = {{QR}}u;
const KR: u32 = {{KR}}u;
const HD: u32 = {{HD}}u;
const P: u32 = (QR + 2u * KR) / 4u;  // row quads per token (QR, KR: multiples of HD, itself of 4)
//! include blocks/pages
//! include blocks/rope_quad

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let s = gid.y;
  let t = gid.x / P;  // the token of sequence s, p its row quad
  if (t >= seqs[s].x) { return; }
  let p = gid.x % P;
  let tok = seqs[s].y + t;  // its row in the pass
  let tb = seqs[s].z;
  let pos = min(tables[tb] + t, tables[tb + 1u] - 1u);
  var v = qkv[tok * P + p];
  let r = p * 4u;
  if (r < QR + KR) { v = rope_quad(v, pos, r); }
  if (r < QR) {
    q[tok * (QR / 4u) + p] = v;
    return;
  }
  let k = r >= QR + KR;  // a v row, else a k row
  let at = kv_row(tb, pos) * (KR / 4u) + (select(r - QR, r - QR - KR, k)) / 4u;
  if (k) { v_put(at, v); } else { k_put(at, v); }
}
