// LoRA, second half: y[t][j] += scale * B[j] . u[t][part(j)] for the tokens of each sequence of a pass, B = the
// rows of the adapter in the sequence's slot (word 2 of its page-table row: slot + 1, 0 = none: y untouched),
// scale = word 3 as f32 (the request's adapter_scale; the adapter's alpha / r is folded into B). Row j of a fused
// projection belongs to part 0, 1 or 2 (rows [0, B1), [B1, B2), [B2, OUT): q | k | v), and reads that part's
// R values of u. B is stored transposed per slot ([R][OUT]) and an invocation takes four rows (j4: one part, as
// B1 and B2 are multiples of 4) for up to TB tokens of one slot (blocks/lora_tokens).
// Grid: (OUT / 4, slot, chunk of TB of the slot's tokens).
@group(0) @binding(0) var<storage, read> u: array<f32>;         // [T][RT]
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;   // [slots][R][OUT / 4]
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;  // [T][OUT_STRIDE / 4]
@group(0) @binding(3) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
@group(0) @binding(6) var<storage, read> tables: array<u32>;    // page tables (model/kv_pool.py)

const OUT4: u32 = {{OUT}}u / 4u;
const STRIDE4: u32 = {{OUT_STRIDE}}u / 4u;
const R: u32 = {{R}}u;
const RT: u32 = {{RT}}u;
const B1: u32 = {{B1}}u;
const B2: u32 = {{B2}}u;
const TB: u32 = 8u;
//! include blocks/lora_tokens

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let j4 = gid.x;
  if (j4 >= OUT4) { return; }
  let mine = lora_tokens(gid.y + 1u, gid.z);
  if (mine.n == 0u) { return; }
  let j = 4u * j4;
  let part = (select(0u, 1u, j >= B1) + select(0u, 1u, j >= B2)) * R;
  var acc: array<vec4<f32>, 8>;
  var at = gid.y * R * OUT4 + j4;
  for (var q = 0u; q < R; q++) {
    let w = b[at];
    at += OUT4;
    for (var t = 0u; t < mine.n; t++) { acc[t] += w * u[mine.tok[t] * RT + part + q]; }
  }
  for (var t = 0u; t < mine.n; t++) { y[mine.tok[t] * STRIDE4 + j4] += mine.scale[t] * acc[t]; }
}
