// Token t of a batched decode pass: one token of each sequence, in sequence order (the whole page table
// bound as `tables`; seqs[t].z: sequence t's row, as the pass's other kernels name it): (its row, position).
@group(0) @binding(8) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (1, t, row, -)

fn token_at(t: u32) -> vec2<u32> {
  let tb = seqs[t].z;
  return vec2<u32>(tb, min(tables[tb], tables[tb + 1u] - 1u));
}
