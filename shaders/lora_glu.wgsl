// LoRA on a fused gate/up projection, with its activation: the projection stored its rows (gate and up
// interleaved: g0, u0, g1, u1, ...) in `gu`; here act[t][i] = act(g_i + dg_i) * (u_i + du_i), the deltas
// scale * B[row] . u[t][part] as lora_expand.wgsl (gate rows part 0, up rows part 1; B transposed per slot,
// [R][2 I]; a sequence with no adapter: no delta), an invocation two of the I outputs (a vec4 of B: g, u, g, u)
// for up to TB tokens of one slot (blocks/lora_tokens; slot 0: the tokens with no adapter, activation only).
// Grid: (I / 2, slots + 1, chunk of TB of the slot's tokens).
// ACT: 0 SwiGLU (silu), 1 GeGLU (gelu_tanh, as epilogues/geglu.wgsl).
@group(0) @binding(0) var<storage, read> u: array<f32>;         // [T][2 R]
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;   // [slots][R][I / 2] (gate, up, gate, up)
@group(0) @binding(2) var<storage, read_write> act: array<vec2<f32>>;  // [T][I / 2]
@group(0) @binding(3) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
@group(0) @binding(4) var<storage, read> gu: array<vec4<f32>>;  // [T][I / 2] (gate, up, gate, up)
@group(0) @binding(6) var<storage, read> tables: array<u32>;    // page tables (model/kv_pool.py)

const I2: u32 = {{I}}u / 2u;
const R: u32 = {{R}}u;
const ACT: u32 = {{ACT}}u;
const TB: u32 = 8u;
//! include blocks/lora_tokens

fn activate(g: f32) -> f32 {
  if (ACT == 1u) {
    let inner = clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0);
    return 0.5 * g * (1.0 + tanh(inner));
  }
  return g / (1.0 + exp(-g));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= I2) { return; }
  let slot = gid.y;
  let mine = lora_tokens(slot, gid.z);
  if (mine.n == 0u) { return; }
  var acc: array<vec4<f32>, 8>;
  if (slot != 0u) {
    var at = (slot - 1u) * R * I2 + i;
    for (var q = 0u; q < R; q++) {
      let w = b[at];
      at += I2;
      for (var t = 0u; t < mine.n; t++) {
        let v = mine.tok[t] * 2u * R + q;
        let g = u[v];
        let p = u[v + R];
        acc[t] += w * vec4<f32>(g, p, g, p);
      }
    }
  }
  for (var t = 0u; t < mine.n; t++) {
    let at = mine.tok[t] * I2 + i;
    let v = gu[at] + mine.scale[t] * acc[t];
    act[at] = vec2<f32>(activate(v.x) * v.y, activate(v.z) * v.w);
  }
}
