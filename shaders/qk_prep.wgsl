// The family steps between the QKV projection and RoPE, in place on each token's fused rows
// [q | k | v]: the q/k/v bias (Qwen2), then an RMSNorm over every q and k head (Qwen3). One
// invocation per (token, head). Rows of q and k heads are in adjacent-pair order
// (model/weights.py); the bias and the norm weights are permuted the same way, and a head's
// RMS does not depend on the order of its rows. RoPE and the KV write follow in rope_kv_seqs.wgsl.
@group(0) @binding(0) var<storage, read_write> qkv: array<f32>;  // [T][QR + 2 KR]
@group(0) @binding(1) var<storage, read> bias: array<f32>;       // [QR + 2 KR] (unused without BIAS)
@group(0) @binding(2) var<storage, read> q_norm: array<f32>;     // [HD] (unused without QK_NORM)
@group(0) @binding(3) var<storage, read> k_norm: array<f32>;     // [HD]
@group(0) @binding(4) var<uniform> tokens: vec4<u32>;            // (T, -, -, -)

const QR: u32 = {{QR}}u;
const KR: u32 = {{KR}}u;
const HD: u32 = {{HD}}u;
const W: u32 = QR + 2u * KR;
const HEADS: u32 = W / HD;  // q, k and v heads
const BIAS: bool = {{BIAS}};
const QK_NORM: bool = {{QK_NORM}};
const EPS: f32 = {{EPS}};

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x / HEADS;
  let h = gid.x % HEADS;
  if (t >= tokens.x) { return; }
  let r0 = h * HD;
  let base = t * W + r0;
  if (BIAS) {
    for (var i = 0u; i < HD; i++) { qkv[base + i] += bias[r0 + i]; }
  }
  if (QK_NORM && r0 < QR + KR) {
    var ss = 0.0;
    for (var i = 0u; i < HD; i++) { let v = qkv[base + i]; ss += v * v; }
    let scale = inverseSqrt(ss / f32(HD) + EPS);
    let is_q = r0 < QR;
    for (var i = 0u; i < HD; i++) { qkv[base + i] = qkv[base + i] * scale * select(k_norm[i], q_norm[i], is_q); }
  }
}
