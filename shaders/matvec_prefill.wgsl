// Y = X W^T for a group of T tokens (prefill). Each invocation computes R rows for the
// group's tokens, decoding each weight block once and using it for TB tokens at a
// time. X (already normalized by rmsnorm.wgsl when the layer needs it) comes through
// a uniform binding, as in matvec_decode.wgsl: on CPU adapters a uniform load is one
// scalar shared by all lanes, a storage load a gather per lane (2.5x slower here).
// Longer prompts are split into token groups, one dispatch each. The group's size and
// first token come from a uniform, not constants, so one compiled kernel serves every
// prompt length; x is bound as a window of a full group from the group's first token.
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<uniform> x: array<vec4<f32>, {{XV4}}>;
@group(0) @binding(2) var<uniform> group: vec4<u32>;  // (tokens in this group, its first token, -, -)

const R: u32 = {{R}}u;
const ROWS: u32 = {{ROWS}}u;
const ROW0: u32 = {{ROW0}}u;
const NB: u32 = {{NB}}u;
const TB: u32 = {{TB}}u;      // tokens per weight-block decode

{{FORMAT}}

{{EPILOGUE}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r0 = gid.x * R;
  if (r0 >= ROWS) { return; }
  let T = group.x;
  let TOK0 = group.y;
  for (var t0 = 0u; t0 < T; t0 += TB) {
    var acc = array<array<f32, R>, TB>();
    for (var b = 0u; b < NB; b++) {
      for (var rr = 0u; rr < R; rr++) {
        let wv = block_decode((r0 + rr) * (NB * WB) + b * WB);
        for (var tt = 0u; tt < TB; tt++) {
          let xo = min(t0 + tt, T - 1u) * NB * 8u + b * 8u;
          var s = vec4<f32>(0.0);
          for (var j = 0u; j < 8u; j++) { s += wv[j] * x[xo + j]; }
          acc[tt][rr] += s.x + s.y + s.z + s.w;
        }
      }
    }
    for (var tt = 0u; tt < TB; tt++) {
      if (t0 + tt < T) { epilogue(TOK0 + t0 + tt, ROW0 + r0, acc[tt]); }
    }
  }
}
