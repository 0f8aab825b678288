// What rope_kv_seqs.wgsl binds: the pass's QKV rows, q, the RoPE table, the sequences'
// uniform, the KV pool's layer (KV_WRITE: blocks/kv_write_*.wgsl) and the page tables.
@group(0) @binding(0) var<storage, read> qkv: array<vec4<f32>>;       // [T][(QR + 2 KR) / 4] quads
@group(0) @binding(1) var<storage, read_write> q: array<vec4<f32>>;   // [T][QR / 4]
@group(0) @binding(2) var<storage, read> rope: array<vec4<f32>>;      // [position][HD / 4] (cos, sin, cos, sin)
@group(0) @binding(3) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
{{KV_WRITE}}
@group(0) @binding(6) var<storage, read> tables: array<u32>;  // page tables (blocks/pages.wgsl)

const QR: u32 = {{QR}}u;
const KR: u32 = {{KR}}u;
const HD: u32 = {{HD}}u;
//! include blocks/pages
//! include blocks/rope_quad

// Invocation gid's place: row group p of token t of sequence gid.y (P groups a token, defined by the kernel),
// that token's row in the pass, its sequence's table word and its position; live is false past the tokens.
struct SeqRow { live: bool, p: u32, tok: u32, tb: u32, pos: u32 }

fn seq_row(gid: vec3<u32>) -> SeqRow {
  let s = gid.y;
  let t = gid.x / P;
  let tb = seqs[s].z;
  return SeqRow(t < seqs[s].x, gid.x % P, seqs[s].y + t, tb, min(tables[tb] + t, tables[tb + 1u] - 1u));
}
