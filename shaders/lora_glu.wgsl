// LoRA on a fused gate/up projection, with its activation: the projection stored its rows (gate and up
// interleaved: g0, u0, g1, u1, ...) in `gu`; here act[t][i] = act(g_i + dg_i) * (u_i + du_i), the deltas
// scale * B[row] . u[t][part] as lora_expand.wgsl (gate rows part 0, up rows part 1; a sequence with no
// adapter: no delta). ACT: 0 SwiGLU (silu), 1 GeGLU (gelu_tanh, as epilogues/geglu.wgsl).
@group(0) @binding(0) var<storage, read> u: array<vec4<f32>>;   // [T][2 R / 4]
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;   // [slots][2 I][R / 4]
@group(0) @binding(2) var<storage, read_write> act: array<f32>; // [T][I]
@group(0) @binding(3) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens, first token, row, -)
@group(0) @binding(4) var<storage, read> gu: array<vec2<f32>>;  // [T][I] (gate, up) pairs
@group(0) @binding(6) var<storage, read> tables: array<u32>;    // page tables (model/kv_pool.py)

const I: u32 = {{I}}u;
const R4: u32 = {{R4}}u;
const ACT: u32 = {{ACT}}u;
const TB: u32 = 8u;

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
  let s = gid.y;
  let t0 = gid.z * TB;
  let n = seqs[s].x;
  if (i >= I || t0 >= n) { return; }
  let tb = seqs[s].z;
  let slot = tables[tb + 2u];
  let scale = bitcast<f32>(tables[tb + 3u]);
  let rg = ((max(slot, 1u) - 1u) * 2u * I + 2u * i) * R4;  // the gate row's B; the up row's follows it
  let tok = seqs[s].y + t0;
  for (var t = 0u; t < min(TB, n - t0); t++) {
    var v = gu[(tok + t) * I + i];
    if (slot != 0u) {
      var dg = vec4<f32>(0.0);
      var du = vec4<f32>(0.0);
      let at = (tok + t) * 2u * R4;
      for (var q = 0u; q < R4; q++) {
        dg += b[rg + q] * u[at + q];
        du += b[rg + R4 + q] * u[at + R4 + q];
      }
      v += scale * vec2<f32>(dg.x + dg.y + dg.z + dg.w, du.x + du.y + du.z + du.w);
    }
    act[(tok + t) * I + i] = activate(v.x) * v.y;
  }
}
