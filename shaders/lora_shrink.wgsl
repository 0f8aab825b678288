// LoRA, first half: u[t] = A x[t] for the tokens of each sequence of a pass, A = the rows of the adapter in the
// sequence's slot (word 2 of its page-table row: slot + 1, 0 = no adapter, whose u is 0). A fused projection's
// parts (q | k | v, gate | up) stack their A rows: RT = parts x the bank's rank. A is stored transposed per slot
// ([IN][RT]) and an invocation computes four of u's values (k4) for up to TB tokens: one vec4 load of A serves
// four outputs and every token of the chunk, the tokens those of one slot (blocks/lora_tokens: rows on one
// adapter share its loads; on lavapipe the loads are what a kernel this small costs). Tokens with no adapter get
// no u (nothing reads it). Grid: (RT / 4, slot, chunk of TB of the slot's tokens).
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;   // [T][IN / 4]: the projection's input rows
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;   // [slots][IN][RT / 4]
@group(0) @binding(2) var<storage, read_write> u: array<vec4<f32>>;  // [T][RT / 4]
@group(0) @binding(3) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
@group(0) @binding(6) var<storage, read> tables: array<u32>;    // page tables (model/kv_pool.py)

const IN4: u32 = {{IN4}}u;
const RT4: u32 = {{RT}}u / 4u;
const TB: u32 = 8u;
//! include blocks/lora_tokens

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let k4 = gid.x;
  if (k4 >= RT4) { return; }
  let mine = lora_tokens(gid.y + 1u, gid.z);
  if (mine.n == 0u) { return; }
  var acc: array<vec4<f32>, 8>;
  var at = gid.y * IN4 * 4u * RT4 + k4;
  for (var i = 0u; i < IN4; i++) {
    let w0 = a[at];
    let w1 = a[at + RT4];
    let w2 = a[at + 2u * RT4];
    let w3 = a[at + 3u * RT4];
    at += 4u * RT4;
    for (var t = 0u; t < mine.n; t++) {
      let xv = x[mine.tok[t] * IN4 + i];
      acc[t] += w0 * xv.x + w1 * xv.y + w2 * xv.z + w3 * xv.w;
    }
  }
  for (var t = 0u; t < mine.n; t++) { u[mine.tok[t] * RT4 + k4] = acc[t]; }
}
