// Embedding lookup: the T token ids come straight from a channel's ring buffer on
// the device (the oldest cell), so no token ever round-trips through the host.
// Each invocation dequantizes one 32-weight block of one token's row.
// binding 0 (and 15): the weights, declared by the FORMAT snippet (storage words or textures)
@group(0) @binding(1) var<storage, read> chan: array<u32>;  // a channel (piegpu/channel_layout.py)
@group(0) @binding(2) var<storage, read_write> h: array<vec4<f32>>;  // [T][hidden]

const NB: u32 = {{NB}}u;
const ROWS: u32 = {{ROWS}}u;   // rows in this chunk of the embedding matrix
const ROW0: u32 = {{ROW0}}u;
const VOCAB: u32 = {{VOCAB}}u;
const SCALE: f32 = {{SCALE}};  // sqrt(hidden) for Gemma (the table is also the tied lm_head, so not pre-scaled)
const CH_HEADER: u32 = {{CH_HEADER}}u;
const CH_HEAD: u32 = {{CH_HEAD}}u;
const CH_RING: u32 = {{CH_RING}}u;
const CH_CELL_WORDS: u32 = {{CH_CELL_WORDS}}u;

{{FORMAT}}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let T = chan[CH_CELL_WORDS];  // the header's cell words: the pass's token count (one kernel for every T)
  let t = gid.x / NB;
  let b = gid.x % NB;
  if (t >= T) { return; }
  let cell = chan[CH_HEAD] % max(chan[CH_RING], 1u);
  // Host puts are range-checked; a device-side producer is clamped, never read out of bounds.
  let token = min(chan[CH_HEADER + cell * T + t], VOCAB - 1u);
  if (token < ROW0 || token >= ROW0 + ROWS) { return; }  // another chunk holds this row
  // A vec4 at a time (block_decode(wb, j)), not the block as one array<vec4<f32>, 8>: naga gives every
  // array type an ArrayStride, which Vulkan forbids on a function variable (VUID-StandaloneSpirv-None-10684).
  let wb = (token - ROW0) * (NB * WB) + b * WB;
  for (var j = 0u; j < 8u; j++) { h[(t * NB + b) * 8u + j] = block_decode(wb, j) * SCALE; }
}
