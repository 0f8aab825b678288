// Causal grouped-query attention for the T tokens of one sequence (prefill): one invocation
// per (token, query head), each walking its positions once with an online softmax in
// registers -- no workgroup memory, no barrier. attention.wgsl (a workgroup per head and
// token, threads splitting the positions) suits decode, where one token has a long
// context; here a pass has many tokens with short contexts each, and its barrier and merge
// cost more than the positions (measured on lavapipe: see model/kernels.py attention).
//! include blocks/tokens_attention_io

//! include blocks/attention_consts
//! include blocks/pages
const HEADS: u32 = {{HEADS}}u;

{{ATTEND}}

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x / HEADS;
  let head = gid.x % HEADS;
  if (t >= seq.x) { return; }
  let tok = seq.y + t;
  let kv = head / GROUP;
  let n = min(tables[0] + t + 1u, tables[1]);  // tables[1]: the working set's positions
  var qv = array<vec4<f32>, HD4>();
  for (var i = 0u; i < HD4; i++) { qv[i] = q[tok * QR4 + head * HD4 + i] * SCALE; }
  var acc = array<vec4<f32>, HD4>();
  let ml = attend(&qv, &acc, kv * HD4, window_start(n), n, 0u, 1u, 0u);
  let m = ml.x;
  let l = ml.y;
  for (var i = 0u; i < HD4; i++) { o[tok * QR4 + head * HD4 + i] = acc[i] / l; }
}
