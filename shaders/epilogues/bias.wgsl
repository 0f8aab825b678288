// Encoder projections (model/encoder_kernels.py): y[t][row] = act(W x + bias[row]), stored or, with ADD,
// added into y in place (the residual stream). ACT is the body of act(v): identity, GELU (erf), GELU (tanh),
// ReLU or tanh (a reranker's head).
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
const OUT_STRIDE: u32 = {{OUT_STRIDE}}u;
const ADD: bool = {{ADD}};

//! include blocks/erf

fn act(v: f32) -> f32 {
  {{ACT}}
}

fn put(i: u32, v: f32) {
  if (ADD) { y[i] += v; } else { y[i] = v; }
}

fn epilogue(t: u32, r: u32, a: f32, b: f32) {
  put(t * OUT_STRIDE + r, act(a + bias[r]));
  put(t * OUT_STRIDE + r + 1u, act(b + bias[r + 1u]));
}
