// rmsnorm.wgsl on adapters with subgroups of 8 or more lanes: a workgroup of 8 lanes per row,
// lane l taking vec4s l, l + 8, ... and a subgroupAdd for the sum of squares. One invocation
// per row (rmsnorm.wgsl) leaves a decode batch's 8 rows to one subgroup on one core, each lane
// loading its whole row in turn.
//! include blocks/rmsnorm_io

@compute @workgroup_size(8)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {
  let t = wid.x;  // one workgroup per row: the grid is exactly T
  let src = (rows.y + t) * H4;
  var ss = 0.0;
  for (var k = lane; k < H4; k += 8u) { let v = x[src + k]; ss += dot(v, v); }
  let scale = inverseSqrt(subgroupAdd(ss) / f32(H4 * 4u) + EPS);
  for (var k = lane; k < H4; k += 8u) {
    let y = x[src + k] * scale * norm_w[k];
    let at = (rows.z + t) * H4 + k;
    if (ADD) { out[at] += y; } else { out[at] = y; }
  }
}
