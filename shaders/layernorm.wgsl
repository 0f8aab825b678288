// LayerNorm in place over the T rows of h: h[t] = (x - mean) / sqrt(var + eps) * w + b, one invocation a row,
// where x is ROW_VALUE's row (the row itself, or for the embeddings the gathered word row plus the token's position
// and token-type rows: blocks/ln_embed.wgsl). BERT's post-norm blocks (model/encoder_kernels.py).
@group(0) @binding(0) var<storage, read_write> h: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> ln_w: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> ln_b: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> rows: vec4<u32>;  // (T, -, -, -)
const H4: u32 = {{H4}}u;
const EPS: f32 = {{EPS}};

{{ROW_VALUE}}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x;
  if (t >= rows.x) { return; }
  let base = t * H4;
  var sum = 0.0;
  for (var k = 0u; k < H4; k++) {
    let v = row_value(t, k);
    h[base + k] = v;
    sum += v.x + v.y + v.z + v.w;
  }
  let mean = sum / f32(H4 * 4u);
  var ss = 0.0;
  for (var k = 0u; k < H4; k++) { let d = h[base + k] - mean; ss += dot(d, d); }
  let scale = inverseSqrt(ss / f32(H4 * 4u) + EPS);
  for (var k = 0u; k < H4; k++) { h[base + k] = (h[base + k] - mean) * scale * ln_w[k] + ln_b[k]; }
}
