// Token t of a pass over one sequence (its own page-table row bound as `tables`): (table word 0, position).
fn token_at(t: u32) -> vec2<u32> {
  return vec2<u32>(0u, min(tables[0] + t, tables[1] - 1u));  // tables[1]: the working set's positions
}
