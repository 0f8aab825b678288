// Add the rows into the residual stream in place: h[t][row] += y.
@group(0) @binding(3) var<storage, read_write> h: array<f32>;
const OUT_STRIDE: u32 = {{OUT_STRIDE}}u;

fn epilogue(t: u32, r0: u32, acc: array<f32, R>) {
  for (var rr = 0u; rr < R; rr++) { h[t * OUT_STRIDE + r0 + rr] += acc[rr]; }
}
