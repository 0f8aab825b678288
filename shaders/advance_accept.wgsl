// The epilogue decided how many of this pass's N tokens stay in the sequence: it put
// that count into the `keep` channel. state[0] += min(count, N), and the cell is taken.
@group(0) @binding(0) var<storage, read_write> state: array<u32>;
@group(0) @binding(1) var<storage, read_write> keep: array<u32>;  // channel: header, cells of one u32

@compute @workgroup_size(1)
fn main() {
  let ring = max(keep[2], 1u);
  let cell = keep[0] % ring;
  let n = min(keep[8u + cell], {{N}}u);
  state[0] = state[0] + n;
  keep[0] = keep[0] + 1u;
}
