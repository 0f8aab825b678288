// Bidirectional attention of a padding-free batch of texts (model/encoder_kernels.py): one invocation per (token,
// head) walks the keys of its own text -- info[t].zw, the text's first token and length, CSR-style -- once with an
// online softmax in registers. q, k and v come stacked per token ([T][q | k | v], the QKV projection's output).
@group(0) @binding(0) var<storage, read> qkv: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> o: array<vec4<f32>>;  // [T][hidden]
@group(0) @binding(2) var<storage, read> info: array<vec4<u32>>;
@group(0) @binding(3) var<uniform> rows: vec4<u32>;  // (T, -, -, -)
const HEADS: u32 = {{HEADS}}u;
const HD4: u32 = {{HD4}}u;
const H4: u32 = {{H4}}u;
const SCALE: f32 = {{SCALE}};

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x / HEADS;
  let head = gid.x % HEADS;
  if (t >= rows.x) { return; }
  let span = info[t].zw;
  var qv = array<vec4<f32>, HD4>();
  for (var i = 0u; i < HD4; i++) { qv[i] = qkv[t * 3u * H4 + head * HD4 + i] * SCALE; }
  var acc = array<vec4<f32>, HD4>();
  var m = -3.0e38;
  var l = 0.0;
  for (var j = span.x; j < span.x + span.y; j++) {
    let kb = j * 3u * H4 + H4 + head * HD4;
    var s = 0.0;
    for (var i = 0u; i < HD4; i++) { s += dot(qv[i], qkv[kb + i]); }
    let m2 = max(m, s);
    let c = exp(m - m2);
    let p = exp(s - m2);
    l = l * c + p;
    for (var i = 0u; i < HD4; i++) { acc[i] = acc[i] * c + p * qkv[kb + H4 + i]; }
    m = m2;
  }
  for (var i = 0u; i < HD4; i++) { o[t * H4 + head * HD4 + i] = acc[i] / l; }
}
