// out[OUT0 + t] = x[FIRST + t] / sqrt(mean(x[FIRST + t]^2) + eps) * weight for t < T, one
// invocation per row (FIRST and OUT0 gather the readout rows before the logits). With ADD the
// row is added to out instead (Gemma 3's sandwich norm of a block's output into the residual).
//! include blocks/rmsnorm_io

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x;
  let T = rows.x;
  let FIRST = rows.y;
  let OUT0 = rows.z;
  if (t >= T) { return; }
  var ss = 0.0;
  let src = (FIRST + t) * H4;
  for (var k = 0u; k < H4; k++) { let v = x[src + k]; ss += dot(v, v); }
  let scale = inverseSqrt(ss / f32(H4 * 4u) + EPS);
  for (var k = 0u; k < H4; k++) {
    let y = x[src + k] * scale * norm_w[k];
    let at = (OUT0 + t) * H4 + k;
    if (ADD) { out[at] += y; } else { out[at] = y; }
  }
}
