// One query head's online softmax over positions lo + p0, lo + p0 + step, ... < hi of the KV
// pages (k_at, v_at) of the sequence whose page-table row starts at word tb (KR4, HD4 and kv_row
// come from the kernel; window_start gives lo for a query that sees n positions): acc gathers
// the weighted values; returns the running (max, sum). Shared by attention.wgsl and
// attention_tokens.wgsl.
fn attend(qv: ptr<function, array<vec4<f32>, HD4>>, acc: ptr<function, array<vec4<f32>, HD4>>, head_base: u32,
          lo: u32, hi: u32, p0: u32, step: u32, tb: u32) -> vec2<f32> {
  var m = LOW;
  var l = 0.0;
  for (var p = lo + p0; p < hi; p += step) {
    let base = kv_row(tb, p) * KR4 + head_base;
    var s4 = vec4<f32>(0.0);
    for (var i = 0u; i < HD4; i++) { s4 += (*qv)[i] * k_at(base + i); }
    let s = s4.x + s4.y + s4.z + s4.w;
    let m2 = max(m, s);
    let c = exp(m - m2);
    let e = exp(s - m2);
    l = l * c + e;
    for (var i = 0u; i < HD4; i++) { (*acc)[i] = (*acc)[i] * c + e * v_at(base + i); }
    m = m2;
  }
  return vec2<f32>(m, l);
}
