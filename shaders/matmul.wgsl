// Y = X W^T for a group of T tokens (prefill, batched decode). Each invocation computes
// an R x TB tile -- R rows of W for TB tokens at a time -- in named registers: the tile
// code (TILE below) is unrolled by piegpu/model/shader_code.py (tile_code), because lavapipe
// keeps loop-indexed arrays in memory (the looped kernel this replaces was 2.3x slower
// at 64 tokens of a Q4_1 gate/up matrix). For each 32-weight block, every row's raw values
// (block_q, or block_q_t from the block's texels) are decoded once and dotted with every token's
// x; the block's (d, m) (block_dm: weight d q + m) scale the sums.
// X (normalized by rmsnorm.wgsl where the layer needs it) comes through a uniform
// binding (lavapipe gathers it lane by lane at a computed index; see tile_code). The
// group's size and first token come from a uniform, so one kernel serves every length;
// x is bound as a window of a full group from the group's first token.
// binding 0 (and 15): the weights, declared by the FORMAT snippet (storage words or textures)
@group(0) @binding(1) {{X_BINDING}}
@group(0) @binding(2) var<uniform> group: vec4<u32>;  // (tokens in this group, its first token, -, -)

const R: u32 = {{R}}u;        // rows per invocation
const ROWS: u32 = {{ROWS}}u;  // rows in this chunk of W
const ROW0: u32 = {{ROW0}}u;  // first row of this chunk in the whole matrix
const NB: u32 = {{NB}}u;      // 32-weight blocks per row

{{FORMAT}}

{{EPILOGUE}}

// Invocations past the chunk's rows run to the end on its last R rows and store nothing: the
// subgroup form of the tile needs every lane of a subgroup active.
@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>{{LANE}}) {
  let live = gid.x * R < ROWS;
  let r0 = min(gid.x * R, ROWS - R);
  let T = group.x;
  let TOK0 = group.y;
  for (var t0 = 0u; t0 < T; t0 += {{TB}}u) {
{{TILE}}
  }
}
