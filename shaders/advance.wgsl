// The sequence grows by the tokens of this pass: state[0] += N (after every layer has
// read the old length).
@group(0) @binding(0) var<storage, read_write> state: array<u32>;
@group(0) @binding(1) var<uniform> n: vec4<u32>;  // (tokens of this pass, -, -, -)

@compute @workgroup_size(1)
fn main() {
  state[0] = state[0] + n.x;
}
