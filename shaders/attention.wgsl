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

const WG: u32 = {{WG}}u;
//! include blocks/attention_consts
//! include blocks/pages

var<workgroup> part_m: array<f32, WG>;
var<workgroup> part_l: array<f32, WG>;
var<workgroup> part_o: array<array<vec4<f32>, HD4>, WG>;

{{ATTEND_FN}}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let head = wid.x;
  let t = wid.y;
  let s = wid.z;
  if (t >= seqs[s].x) { return; }  // this sequence has fewer tokens than the longest
  let tok = seqs[s].y + t;
  let kv = head / GROUP;
  var qv = array<vec4<f32>, HD4>();
  for (var i = 0u; i < HD4; i++) { qv[i] = q[tok * QR4 + head * HD4 + i] * SCALE; }
  var acc = array<vec4<f32>, HD4>();
  let tb = seqs[s].z;
  let ml = attend(&qv, &acc, kv * HD4, lid, min(tables[tb] + t + 1u, tables[tb + 1u]), WG, tb);
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
    o[tok * QR4 + head * HD4 + d] = out / ll;
  }
}
