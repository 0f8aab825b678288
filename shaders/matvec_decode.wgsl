// y = W x for one token (decode). Each invocation computes R consecutive rows of
// one row chunk of W; x is read through a uniform binding (one scalar load shared by
// every lane on CPU adapters, measured 2x faster than a storage binding on lavapipe)
// and, when NORM, RMS-normalized on the fly (the norm is cheap next to R rows of W).
// The epilogue snippet decides what happens to the R results (store, residual add,
// RoPE + KV-cache write, SwiGLU).
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<uniform> x: array<vec4<f32>, {{K4}}>;
@group(0) @binding(2) var<storage, read> norm_w: array<vec4<f32>>;

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
    var xb = array<vec4<f32>, 8>();
    var xsum = 0.0;
    for (var j = 0u; j < 8u; j++) {
      var v = x[b * 8u + j];
      if (NORM) { v = v * scale * norm_w[b * 8u + j]; }
      xb[j] = v;
      xsum += v.x + v.y + v.z + v.w;
    }
    for (var rr = 0u; rr < R; rr++) {
      acc[rr] += block_dot((r0 + rr) * (NB * WB) + b * WB, xb, xsum);
    }
  }
  epilogue(0u, ROW0 + r0, acc);
}
