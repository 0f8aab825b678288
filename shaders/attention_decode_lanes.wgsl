// Causal grouped-query attention for the sequences of a decode pass on CPU adapters with
// subgroups of 8 or more lanes: a workgroup of 8 invocations per (HG query heads of one KV
// head, token, sequence), lane l holding vec4s l, l + 8, ... of each head's output; the positions
// go in blocks of 8, one a lane, each K row scored by its lane against the HG heads and each V
// row added by all lanes with the weights broadcast (model/shader_code.py decode_lane_code).
// attention.wgsl splits the positions over its threads instead, so each thread loads all of q and merges its
// partials through workgroup memory after a barrier: on lavapipe, where a storage load is a
// loop over the lanes and a barrier switches every invocation, that fixed cost was most of
// a short context's attention. The sequences share the layer's KV pages, each through its
// page-table row (word seqs[i].z of `tables`). `sink` (with K and V in buffers) keeps the V touches.
// With SPLITS > 1 (one token a sequence) grid y is the split, each workgroup walks one run of
// the positions and leaves its partial softmax in `parts`; attention_combine.wgsl merges them.
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;   // [T][heads * HD]
@group(0) @binding(1) var<storage, read_write> o: array<vec4<f32>>;  // [T][heads * HD]
@group(0) @binding(2) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
{{KV}}
@group(0) @binding(5) var<storage, read> tables: array<u32>;  // page tables (blocks/pages.wgsl)
{{PARTS}}
{{SINK}}

//! include blocks/attention_consts
//! include blocks/pages
const HG: u32 = {{HG}}u;        // query heads per workgroup (a divisor of GROUP)
const SPLITS: u32 = {{SPLITS}}u;  // runs of positions a sequence's attention is split into (flash-decoding)
const HEADS: u32 = QR4 / HD4;

{{ATTEND}}

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {
  let head = wid.x * HG;  // the first of this workgroup's heads
  let t = wid.y / SPLITS;
  let split = wid.y % SPLITS;
  let s = wid.z;
  if (t >= seqs[s].x) { return; }  // this sequence has fewer tokens than the longest (the whole workgroup)
  let qo = (seqs[s].y + t) * QR4 + head * HD4;  // this query's vec4s in q and o
  let kvb = (head / GROUP) * HD4;
  attend(qo, kvb, t, lane, seqs[s].z, split, (s * HEADS + head) * SPLITS + split);
}
