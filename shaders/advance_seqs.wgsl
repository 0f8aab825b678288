// Every sequence of a batched pass grows by its tokens of the pass, in one dispatch: the
// length word of its page-table row (seqs[i].z, blocks/pages.wgsl) += seqs[i].x, after every
// layer has read the old lengths.
@group(0) @binding(0) var<storage, read_write> tables: array<u32>;
@group(0) @binding(1) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= {{SEQS}}u) { return; }
  tables[seqs[i].z] = tables[seqs[i].z] + seqs[i].x;
}
