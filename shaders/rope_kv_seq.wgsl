// RoPE + KV-cache write for one sequence of a batched pass. The QKV matvec ran over every
// token of the pass (rows [q | k | v], q and k in adjacent-pair order, as in
// epilogues/rope_kv.wgsl); this kernel takes the sequence's tokens, rotates each q and k
// pair at the sequence's positions (state[0] + t), writes q to its buffer and k, v into
// this sequence's KV cache. One invocation per (token, row pair).
@group(0) @binding(0) var<storage, read> qkv: array<vec2<f32>>;       // [T][(QR + 2 KR) / 2] pairs
@group(0) @binding(1) var<storage, read_write> q: array<vec2<f32>>;   // [T][QR / 2]
@group(0) @binding(2) var<storage, read_write> kc: array<vec2<f32>>;  // [position][KR / 2]
@group(0) @binding(3) var<storage, read_write> vc: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> state: array<u32>;           // [length, positions]
@group(0) @binding(5) var<storage, read> rope: array<vec2<f32>>;      // [position][HD / 2] (cos, sin)
@group(0) @binding(6) var<uniform> seq: vec4<u32>;  // (tokens of this sequence, its first token in the pass, -, -)

const QR: u32 = {{QR}}u;
const KR: u32 = {{KR}}u;
const HD: u32 = {{HD}}u;
const P: u32 = (QR + 2u * KR) / 2u;  // row pairs per token

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x / P;
  let p = gid.x % P;
  if (t >= seq.x) { return; }
  let tok = seq.y + t;
  let pos = min(state[0] + t, state[1] - 1u);  // state[1]: the working set's positions
  var v = qkv[tok * P + p];
  let r = p * 2u;
  if (r < QR + KR) {
    let cs = rope[pos * (HD / 2u) + (r % HD) / 2u];
    v = vec2<f32>(v.x * cs.x - v.y * cs.y, v.y * cs.x + v.x * cs.y);
  }
  if (r < QR) {
    q[tok * (QR / 2u) + p] = v;
  } else if (r < QR + KR) {
    kc[pos * (KR / 2u) + (r - QR) / 2u] = v;
  } else {
    vc[pos * (KR / 2u) + (r - QR - KR) / 2u] = v;
  }
}
