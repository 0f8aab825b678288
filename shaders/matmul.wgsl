// Y = X W^T for a group of T tokens (prefill, batched decode). Each invocation computes
// an R x TB tile -- R rows of W for TB tokens at a time -- in named registers: the tile
// code (TILE below) is unrolled by piegpu/model/kernels.py (tile_code), because lavapipe
// keeps loop-indexed arrays in memory (the looped kernel this replaces was 2.3x slower
// at 64 tokens of a Q4_1 gate/up matrix). For each 32-weight block, every row's raw
// values are decoded once (block_q) and used for all TB tokens, and the scale and min
// factor out of the dot product: sum_j (d q_j + m) x_j = d sum_j q_j x_j + m sum_j x_j.
// X (normalized by rmsnorm.wgsl where the layer needs it) comes through a uniform
// binding: on CPU adapters a uniform load is one scalar shared by all lanes. The
// group's size and first token come from a uniform, so one kernel serves every length;
// x is bound as a window of a full group from the group's first token.
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<uniform> x: array<vec4<f32>, {{XV4}}>;
@group(0) @binding(2) var<uniform> group: vec4<u32>;  // (tokens in this group, its first token, -, -)

const R: u32 = {{R}}u;        // rows per invocation
const ROWS: u32 = {{ROWS}}u;  // rows in this chunk of W
const ROW0: u32 = {{ROW0}}u;  // first row of this chunk in the whole matrix
const NB: u32 = {{NB}}u;      // 32-weight blocks per row

{{FORMAT}}

{{EPILOGUE}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r0 = gid.x * R;
  if (r0 >= ROWS) { return; }
  let T = group.x;
  let TOK0 = group.y;
  for (var t0 = 0u; t0 < T; t0 += {{TB}}u) {
{{TILE}}
  }
}
