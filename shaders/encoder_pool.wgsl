// One vector per text of a padding-free batch (model/encoder_kernels.py): texts[b] = (first token, tokens); MODE 0
// mean, 1 the first token ([CLS] / <s>), 2 the last, 3 the maximum, 4 the sum over sqrt(tokens), 5 the mean weighted
// by position (1, 2, ...): sentence-transformers' modes, per vec4 of the hidden row.
@group(0) @binding(0) var<storage, read> h: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> pooled: array<vec4<f32>>;  // [B][hidden]
@group(0) @binding(2) var<storage, read> texts: array<vec2<u32>>;
@group(0) @binding(3) var<uniform> rows: vec4<u32>;  // (B, -, -, -)
const H4: u32 = {{H4}}u;
const MODE: u32 = {{MODE}}u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let b = gid.x / H4;
  let k = gid.x % H4;
  if (b >= rows.x) { return; }
  let span = texts[b];
  var v: vec4<f32>;
  if (MODE == 1u) {
    v = h[span.x * H4 + k];
  } else if (MODE == 2u) {
    v = h[(span.x + span.y - 1u) * H4 + k];
  } else if (MODE == 3u) {
    v = h[span.x * H4 + k];
    for (var j = 1u; j < span.y; j++) { v = max(v, h[(span.x + j) * H4 + k]); }
  } else if (MODE == 5u) {
    v = vec4<f32>(0.0);
    for (var j = 0u; j < span.y; j++) { v += f32(j + 1u) * h[(span.x + j) * H4 + k]; }
    v = v / f32(span.y * (span.y + 1u) / 2u);
  } else {
    v = vec4<f32>(0.0);
    for (var j = 0u; j < span.y; j++) { v += h[(span.x + j) * H4 + k]; }
    v = v / select(f32(span.y), sqrt(f32(span.y)), MODE == 4u);
  }
  pooled[b * H4 + k] = v;
}
