// Causal grouped-query attention for the T new tokens of one sequence: one workgroup per
// (query head, token). In a batched pass the sequence's tokens start at token seq.y of
// the pass (q and o rows); its positions come from its own state and KV cache. Each thread walks a strided subset of the positions once with an online
// softmax (running max, sum and weighted V), then one barrier and a merge of the
// per-thread partials -- no rescans of the context and no barrier per position.
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;   // [T][heads * HD]
@group(0) @binding(1) var<storage, read> kc: array<vec4<f32>>;  // [position][kv_heads * HD]
@group(0) @binding(2) var<storage, read> vc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> state: array<u32>;
@group(0) @binding(4) var<storage, read_write> o: array<vec4<f32>>;  // [T][heads * HD]
@group(0) @binding(5) var<uniform> seq: vec4<u32>;  // (tokens of this sequence, its first token in the pass, -, -)

const WG: u32 = {{WG}}u;
const HD4: u32 = {{HD}}u / 4u;
const QR4: u32 = {{QR}}u / 4u;
const KR4: u32 = {{KR}}u / 4u;
const GROUP: u32 = {{GROUP}}u;  // query heads per KV head
const SCALE: f32 = {{SCALE}};   // 1 / sqrt(HD)
const LOW: f32 = -3.0e38;       // finite "minus infinity": drivers may assume no inf

var<workgroup> part_m: array<f32, WG>;
var<workgroup> part_l: array<f32, WG>;
var<workgroup> part_o: array<array<vec4<f32>, HD4>, WG>;

{{ATTEND}}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let head = wid.x;
  let t = wid.y;
  let tok = seq.y + t;
  let kv = head / GROUP;
  let n = min(state[0] + t + 1u, state[1]);  // state[1]: the working set's positions
  var qv = array<vec4<f32>, HD4>();
  for (var i = 0u; i < HD4; i++) { qv[i] = q[tok * QR4 + head * HD4 + i] * SCALE; }
  var acc = array<vec4<f32>, HD4>();
  let ml = attend(&qv, &acc, kv * HD4, lid, n, WG);
  let m = ml.x;
  let l = ml.y;
  part_m[lid] = m;
  part_l[lid] = l;
  part_o[lid] = acc;
  workgroupBarrier();
  if (lid < HD4) {
    var mm = LOW;
    for (var u = 0u; u < WG; u++) { mm = max(mm, part_m[u]); }
    var ll = 0.0;
    var out = vec4<f32>(0.0);
    for (var u = 0u; u < WG; u++) {
      let c = exp(part_m[u] - mm);
      ll += part_l[u] * c;
      out += part_o[u][lid] * c;
    }
    o[tok * QR4 + head * HD4 + lid] = out / ll;
  }
}
