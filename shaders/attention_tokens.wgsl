// Causal grouped-query attention for the T tokens of one sequence (prefill): one invocation
// per (token, query head), each walking its positions once with an online softmax in
// registers -- no workgroup memory, no barrier. attention.wgsl (a workgroup per head and
// token, threads splitting the positions) suits decode, where one token has a long
// context; here a pass has many tokens with short contexts each, and its barrier and merge
// cost more than the positions (measured on lavapipe: see model/kernels.py attention).
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;   // [T][heads * HD]
@group(0) @binding(1) var<storage, read> kc: array<vec4<f32>>;  // [position][kv_heads * HD]
@group(0) @binding(2) var<storage, read> vc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> state: array<u32>;
@group(0) @binding(4) var<storage, read_write> o: array<vec4<f32>>;  // [T][heads * HD]
@group(0) @binding(5) var<uniform> seq: vec4<u32>;  // (tokens of this sequence, its first token in the pass, -, -)

const HD4: u32 = {{HD}}u / 4u;
const QR4: u32 = {{QR}}u / 4u;
const KR4: u32 = {{KR}}u / 4u;
const HEADS: u32 = {{HEADS}}u;
const GROUP: u32 = {{GROUP}}u;  // query heads per KV head
const SCALE: f32 = {{SCALE}};   // 1 / sqrt(HD)
const WINDOW: u32 = {{WINDOW}}u;  // sliding window in positions; 0: full causal attention
const LOW: f32 = -3.0e38;       // finite "minus infinity": drivers may assume no inf

{{ATTEND}}

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x / HEADS;
  let head = gid.x % HEADS;
  if (t >= seq.x) { return; }
  let tok = seq.y + t;
  let kv = head / GROUP;
  let n = min(state[0] + t + 1u, state[1]);  // state[1]: the working set's positions
  var qv = array<vec4<f32>, HD4>();
  for (var i = 0u; i < HD4; i++) { qv[i] = q[tok * QR4 + head * HD4 + i] * SCALE; }
  var acc = array<vec4<f32>, HD4>();
  let ml = attend(&qv, &acc, kv * HD4, 0u, n, 1u);
  let m = ml.x;
  let l = ml.y;
  for (var i = 0u; i < HD4; i++) { o[tok * QR4 + head * HD4 + i] = acc[i] / l; }
}
