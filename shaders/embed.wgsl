// Embedding lookup: the T token ids come straight from a channel's ring buffer on
// the device (the oldest cell), so no token ever round-trips through the host.
// Each invocation dequantizes one 32-weight block of one token's row.
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> chan: array<u32>;  // header [head, tail, capacity, ...], cells
@group(0) @binding(2) var<storage, read_write> h: array<vec4<f32>>;  // [T][hidden]

const NB: u32 = {{NB}}u;
const ROWS: u32 = {{ROWS}}u;   // rows in this chunk of the embedding matrix
const ROW0: u32 = {{ROW0}}u;
const VOCAB: u32 = {{VOCAB}}u;
const HEADER: u32 = 8u;

{{FORMAT}}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let T = chan[3];  // the header's cell words: the pass's token count (one kernel for every T)
  let t = gid.x / NB;
  let b = gid.x % NB;
  if (t >= T) { return; }
  let cell = chan[0] % max(chan[2], 1u);
  // Host puts are range-checked; a device-side producer is clamped, never read out of bounds.
  let token = min(chan[HEADER + cell * T + t], VOCAB - 1u);
  if (token < ROW0 || token >= ROW0 + ROWS) { return; }  // another chunk holds this row
  let v = block_decode((token - ROW0) * (NB * WB) + b * WB);
  for (var j = 0u; j < 8u; j++) { h[(t * NB + b) * 8u + j] = v[j]; }
}
