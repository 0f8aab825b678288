// Store the rows: y[t][row].
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
const OUT_STRIDE: u32 = {{OUT_STRIDE}}u;

fn epilogue(t: u32, r0: u32, acc: array<f32, R>) {
  for (var rr = 0u; rr < R; rr++) { y[t * OUT_STRIDE + r0 + rr] = acc[rr]; }
}
