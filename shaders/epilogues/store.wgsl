// Store the rows: y[t][row].
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
const OUT_STRIDE: u32 = {{OUT_STRIDE}}u;

fn epilogue(t: u32, r: u32, a: f32, b: f32) {
  y[t * OUT_STRIDE + r] = a;
  y[t * OUT_STRIDE + r + 1u] = b;
}
