// LoRA, second half: y[t][j] += scale * B[j] . u[t][part(j)] for the tokens of each sequence of a pass, B = the
// rows of the adapter in the sequence's slot (word 2 of its page-table row: slot + 1, 0 = none: y untouched),
// scale = word 3 as f32 (the request's adapter_scale; the adapter's alpha / r is folded into B). Row j of a fused
// projection belongs to part 0, 1 or 2 (rows [0, B1), [B1, B2), [B2, OUT): q | k | v), and reads that part's
// R values of u. Grid: (OUT, sequence, token chunk of TB); each invocation keeps its B row for the chunk.
@group(0) @binding(0) var<storage, read> u: array<vec4<f32>>;   // [T][RT / 4]
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;   // [slots][OUT][R / 4]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;   // [T][OUT_STRIDE]
@group(0) @binding(3) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
@group(0) @binding(6) var<storage, read> tables: array<u32>;    // page tables (model/kv_pool.py)

const OUT: u32 = {{OUT}}u;
const OUT_STRIDE: u32 = {{OUT_STRIDE}}u;
const R4: u32 = {{R4}}u;
const RT4: u32 = {{RT4}}u;
const B1: u32 = {{B1}}u;
const B2: u32 = {{B2}}u;
const TB: u32 = 8u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let j = gid.x;
  let s = gid.y;
  let t0 = gid.z * TB;
  let n = seqs[s].x;
  if (j >= OUT || t0 >= n) { return; }
  let tb = seqs[s].z;
  let slot = tables[tb + 2u];
  if (slot == 0u) { return; }
  let scale = bitcast<f32>(tables[tb + 3u]);
  let row = ((slot - 1u) * OUT + j) * R4;
  let part = (select(0u, 1u, j >= B1) + select(0u, 1u, j >= B2)) * R4;
  let tok = seqs[s].y + t0;
  for (var t = 0u; t < min(TB, n - t0); t++) {
    var acc = vec4<f32>(0.0);
    let at = (tok + t) * RT4 + part;
    for (var q = 0u; q < R4; q++) { acc += b[row + q] * u[at + q]; }
    y[(tok + t) * OUT_STRIDE + j] += scale * (acc.x + acc.y + acc.z + acc.w);
  }
}
