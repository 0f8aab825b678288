// The epilogue decided how many of this pass's N tokens stay in the sequence: it put
// that count into the `keep` channel. state[0] += min(count, N), and the cell is taken.
@group(0) @binding(0) var<storage, read_write> state: array<u32>;
@group(0) @binding(1) var<storage, read_write> keep: array<u32>;  // a channel of one-u32 cells (piegpu/channel_layout.py)

const CH_HEADER: u32 = {{CH_HEADER}}u;
const CH_HEAD: u32 = {{CH_HEAD}}u;
const CH_RING: u32 = {{CH_RING}}u;

@compute @workgroup_size(1)
fn main() {
  let ring = max(keep[CH_RING], 1u);
  let cell = keep[CH_HEAD] % ring;
  let n = min(keep[CH_HEADER + cell], {{N}}u);
  state[0] = state[0] + n;
  keep[CH_HEAD] = keep[CH_HEAD] + 1u;
}
