// LoRA, first half: u[t] = A x[t] for the tokens of each sequence of a pass, A = the rows of the adapter in the
// sequence's slot (word 2 of its page-table row: slot + 1, 0 = no adapter, whose u is 0). A fused projection's
// parts (q | k | v, gate | up) stack their A rows: RT = parts x the bank's rank. Grid: (RT, sequence, token
// chunk of TB); each invocation reads its A row once for the chunk's tokens.
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;   // [T][IN / 4]: the projection's input rows
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;   // [slots][RT][IN / 4]
@group(0) @binding(2) var<storage, read_write> u: array<f32>;   // [T][RT]
@group(0) @binding(3) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
@group(0) @binding(6) var<storage, read> tables: array<u32>;    // page tables (model/kv_pool.py)

const IN4: u32 = {{IN4}}u;
const RT: u32 = {{RT}}u;
const TB: u32 = 8u;

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let k = gid.x;
  let s = gid.y;
  let t0 = gid.z * TB;
  let n = seqs[s].x;
  if (k >= RT || t0 >= n) { return; }
  let slot = tables[seqs[s].z + 2u];
  let m = min(TB, n - t0);
  let tok = seqs[s].y + t0;
  var acc: array<f32, 8>;
  if (slot != 0u) {
    let row = ((slot - 1u) * RT + k) * IN4;
    for (var i = 0u; i < IN4; i++) {
      let w = a[row + i];
      for (var t = 0u; t < m; t++) { acc[t] += dot(w, x[(tok + t) * IN4 + i]); }
    }
  }
  for (var t = 0u; t < m; t++) { u[(tok + t) * RT + k] = acc[t]; }
}
