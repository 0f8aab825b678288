// y = W x for one token (decode). Each invocation computes R consecutive rows of
// one row chunk of W; x is read through a uniform binding (one scalar load shared by
// every lane on CPU adapters, measured 2x faster than a storage binding on lavapipe)
// and, when NORM, RMS-normalized on the fly (the norm is cheap next to R rows of W).
// The epilogue snippet decides what happens to the R results (store, residual add,
// RoPE + KV-cache write, SwiGLU).
// binding 0 (and 15): the weights, declared by the FORMAT snippet (storage words or textures)
@group(0) @binding(1) var<uniform> x: array<vec4<f32>, {{K4}}>;
@group(0) @binding(2) var<uniform> norm_w: array<vec4<f32>, {{K4}}>;

const R: u32 = {{R}}u;          // rows per invocation
const ROWS: u32 = {{ROWS}}u;    // rows in this chunk of W
const ROW0: u32 = {{ROW0}}u;    // first row of this chunk in the whole matrix
const NB: u32 = {{NB}}u;        // 32-weight blocks per row
const NORM: bool = {{NORM}};
const EPS: f32 = {{EPS}};

{{FORMAT}}

{{EPILOGUE}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r0 = gid.x * R;
  if (r0 >= ROWS) { return; }
  var scale = 1.0;
  if (NORM) {
    var ss = 0.0;
    for (var k = 0u; k < NB * 8u; k++) { ss += dot(x[k], x[k]); }
    scale = inverseSqrt(ss / f32(NB * 32u) + EPS);
  }
  var acc = array<f32, R>();
  for (var b = 0u; b < NB; b++) {
    let k = b * 8u;
    var x0 = x[k];
    var x1 = x[k + 1u];
    var x2 = x[k + 2u];
    var x3 = x[k + 3u];
    var x4 = x[k + 4u];
    var x5 = x[k + 5u];
    var x6 = x[k + 6u];
    var x7 = x[k + 7u];
    if (NORM) {
      x0 *= scale * norm_w[k];
      x1 *= scale * norm_w[k + 1u];
      x2 *= scale * norm_w[k + 2u];
      x3 *= scale * norm_w[k + 3u];
      x4 *= scale * norm_w[k + 4u];
      x5 *= scale * norm_w[k + 5u];
      x6 *= scale * norm_w[k + 6u];
      x7 *= scale * norm_w[k + 7u];
    }
    let xs4 = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
    let xsum = xs4.x + xs4.y + xs4.z + xs4.w;
{{ROW_DOTS}}
  }
  epilogue(0u, ROW0 + r0, acc);
}
