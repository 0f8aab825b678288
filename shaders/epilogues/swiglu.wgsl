// Gate and up rows are interleaved (g0, u0, g1, u1, ...): out[t][i] = silu(g_i) * u_i.
@group(0) @binding(3) var<storage, read_write> act: array<f32>;
const OUT_STRIDE: u32 = {{OUT_STRIDE}}u;

fn epilogue(t: u32, r: u32, g: f32, u: f32) {
  act[t * OUT_STRIDE + r / 2u] = g / (1.0 + exp(-g)) * u;
}
