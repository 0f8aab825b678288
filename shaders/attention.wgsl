// Causal grouped-query attention: one workgroup per (query head, token, sequence). Each
// thread walks a strided subset of the positions once with an online softmax (running max,
// sum and weighted V; shaders/attend.wgsl), then one barrier and a merge of the per-thread
// partials -- no rescans of the context and no barrier per position. A dispatch serves the
// SEQS sequences of a pass (one for a single sequence): they share the layer's KV pages and
// each has its page-table row (at word seqs[i].z of `tables`); its tokens start at token
// seqs[i].y of the pass.
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;   // [T][heads * HD]
@group(0) @binding(1) var<storage, read_write> o: array<vec4<f32>>;  // [T][heads * HD]
@group(0) @binding(2) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
{{KV}}
@group(0) @binding(5) var<storage, read> tables: array<u32>;  // page tables (blocks/pages.wgsl)
@group(0) @binding(6) var<storage, read_write> parts: array<vec4<f32>>;  // [seq][head][split][HD4 + 1] (SPLITS > 1)

const WG: u32 = {{WG}}u;
const SPLITS: u32 = {{SPLITS}}u;  // runs of positions a query's attention is split into (grid y: token * SPLITS + split)
//! include blocks/attention_consts
//! include blocks/pages
const HEADS: u32 = QR4 / HD4;

var<workgroup> part_m: array<f32, WG>;
var<workgroup> part_l: array<f32, WG>;
var<workgroup> part_o: array<array<vec4<f32>, HD4>, WG>;

{{ATTEND_FN}}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let head = wid.x;
  let t = wid.y / SPLITS;
  let split = wid.y % SPLITS;
  let s = wid.z;
  if (t >= seqs[s].x) { return; }  // this sequence has fewer tokens than the longest
  let tok = seqs[s].y + t;
  let kv = head / GROUP;
  var qv = array<vec4<f32>, HD4>();
  for (var i = 0u; i < HD4; i++) { qv[i] = q[tok * QR4 + head * HD4 + i] * SCALE; }
  var acc = array<vec4<f32>, HD4>();
  let tb = seqs[s].z;
  let n = min(tables[tb] + t + 1u, tables[tb + 1u]);
  let first = window_start(n);
  let chunk = (n - first + SPLITS - 1u) / SPLITS;  // this workgroup's run of positions (flash-decoding)
  let lo = min(first + split * chunk, n);
  let ml = attend(&qv, &acc, kv * HD4, lo, min(lo + chunk, n), lid, WG, tb);
  part_m[lid] = ml.x;
  part_l[lid] = ml.y;
  part_o[lid] = acc;
  workgroupBarrier();
  var mm = LOW;
  for (var u = 0u; u < WG; u++) { mm = max(mm, part_m[u]); }
  for (var d = lid; d < HD4; d += WG) {  // every output vec4, also when WG < HD4
    var ll = 0.0;
    var out = vec4<f32>(0.0);
    for (var u = 0u; u < WG; u++) {
      let c = exp(part_m[u] - mm);
      ll += part_l[u] * c;
      out += part_o[u][d] * c;
    }
    if (SPLITS == 1u) {
      o[tok * QR4 + head * HD4 + d] = out / ll;
    } else {  // the partial softmax, merged by attention_combine.wgsl
      let r = ((s * HEADS + head) * SPLITS + split) * (HD4 + 1u);
      parts[r + d] = out;
      if (d == 0u) { parts[r + HD4] = vec4<f32>(mm, ll, 0.0, 0.0); }
    }
  }
}
