// RoPE, KV-cache write and causal grouped-query attention in one dispatch for the sequences of
// a decode pass (one token each) on CPU adapters with subgroups of 8 or more lanes. As
// attention_decode_lanes.wgsl -- a workgroup of 8 lanes per (HG query heads of one KV head,
// sequence), lane l holding vec4s l, l + 8, ... of each head -- but reading the QKV matmul's
// rows [q | k | v] (q and k in adjacent-pair order, epilogues/rope_kv.wgsl) instead of a rotated
// q: each lane rotates its vec4s of q and of the token's k, the KV head's first workgroup
// writes k and v into the sequence's cache at its position, and the attention takes the
// cached positions from memory and the token's own from registers (no workgroup reads another's
// writes). This replaces a rope_kv_seqs dispatch per layer, which bound as many buffers and cost
// as much as the attention for short contexts. The sequences share the layer's KV pages, each
// through its page-table row (word seqs[i].z of `tables`); attend() is model/shader_code.py
// decode_lane_code.
@group(0) @binding(0) var<storage, read> qkv: array<vec4<f32>>;      // [T][QR + 2 KR]
@group(0) @binding(1) var<storage, read_write> o: array<vec4<f32>>;  // [T][heads * HD]
@group(0) @binding(2) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens = 1, its token, row, -)
@group(0) @binding(3) var<storage, read> rope: array<vec2<f32>>;     // [position][HD / 2] (cos, sin)
{{KV_RW}}
@group(0) @binding(6) var<storage, read> tables: array<u32>;  // page tables (blocks/pages.wgsl)
{{SINK}}
// KV in storage buffers only (blocks/kv_rw_storage*.wgsl, at bindings 4 and 5): this kernel writes the
// token's K and V and reads the others' in one dispatch (with KV textures the batched pass runs
// rope_kv_seqs.wgsl, then attention_decode_lanes.wgsl)

const HD: u32 = {{HD}}u;
//! include blocks/attention_consts
//! include blocks/pages
const HG: u32 = {{HG}}u;        // query heads per workgroup (a divisor of GROUP)

// vec4 j of a head (dims 4j .. 4j + 3: pairs 2j and 2j + 1) rotated to position pos.
fn rot(v: vec4<f32>, pos: u32, j: u32) -> vec4<f32> {
  let a = rope[pos * (HD / 2u) + 2u * j];
  let b = rope[pos * (HD / 2u) + 2u * j + 1u];
  return vec4<f32>(v.x * a.x - v.y * a.y, v.y * a.x + v.x * a.y, v.z * b.x - v.w * b.y, v.w * b.x + v.z * b.y);
}

{{ATTEND}}

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {
  let head = wid.x * HG;  // the first of this workgroup's heads
  let s = wid.z;
  let tok = seqs[s].y;
  attend(tok, head, lane, seqs[s].z);
}
