// Gate and up rows are interleaved (g0, u0, g1, u1, ...): out[t][i] = gelu_tanh(g_i) * u_i (Gemma's GeGLU;
// torch's gelu(approximate="tanh")). tanh's argument is clamped to +-15, where tanh is +-1 in f32,
// so no exp overflows inside a driver's tanh.
@group(0) @binding(3) var<storage, read_write> act: array<f32>;
const OUT_STRIDE: u32 = {{OUT_STRIDE}}u;

fn epilogue(t: u32, r: u32, g: f32, u: f32) {
  let inner = clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0);
  act[t * OUT_STRIDE + r / 2u] = 0.5 * g * (1.0 + tanh(inner)) * u;
}
