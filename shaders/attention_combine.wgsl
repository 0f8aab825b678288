// The second half of a split decode attention (flash-decoding; attention_decode_lanes.wgsl with
// SPLITS > 1): per (sequence, head, output vec4) merge the SPLITS partial softmaxes -- each a
// (max, sum) and an unnormalized output -- into o = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
// A split with no positions left (m = LOW, l = 0, acc = 0) adds nothing.
@group(0) @binding(0) var<storage, read> parts: array<vec4<f32>>;  // [seq][head][split][HD4 + 1]
@group(0) @binding(1) var<storage, read_write> o: array<vec4<f32>>;  // [T][heads * HD]
@group(0) @binding(2) var<uniform> seqs: array<vec4<u32>, {{SEQS}}>;  // per sequence: (tokens = 1, its token, -, -)

const HD4: u32 = {{HD}}u / 4u;
const HEADS: u32 = {{HEADS}}u;
const SPLITS: u32 = {{SPLITS}}u;
const LOW: f32 = -3.0e38;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let d = gid.x % HD4;
  let head = (gid.x / HD4) % HEADS;
  let s = gid.x / (HD4 * HEADS);
  if (s >= {{SEQS}}u) { return; }
  let base = (s * HEADS + head) * SPLITS;
  var mm = LOW;
  for (var k = 0u; k < SPLITS; k++) { mm = max(mm, parts[(base + k) * (HD4 + 1u) + HD4].x); }
  var ll = 0.0;
  var acc = vec4<f32>(0.0);
  for (var k = 0u; k < SPLITS; k++) {
    let r = (base + k) * (HD4 + 1u);
    let c = exp(parts[r + HD4].x - mm);
    ll += parts[r + HD4].y * c;
    acc += parts[r + d] * c;
  }
  o[seqs[s].y * (HEADS * HD4) + head * HD4 + d] = acc / ll;
}
