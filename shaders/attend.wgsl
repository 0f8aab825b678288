// One query head's online softmax over positions first + p0, first + p0 + step, ... < n of the
// KV pages (k_at, v_at) of the sequence whose page-table row starts at word tb, where first = n - WINDOW with a sliding window (WINDOW > 0: the query at position
// n - 1 sees its last WINDOW positions, as transformers' sliding mask), else 0 (kc, vc, KR4,
// HD4, WINDOW and kv_row come from the kernel): acc gathers the weighted values; returns the running
// (max, sum). Shared by attention.wgsl and attention_tokens.wgsl.
fn attend(qv: ptr<function, array<vec4<f32>, HD4>>, acc: ptr<function, array<vec4<f32>, HD4>>, head_base: u32,
          p0: u32, n: u32, step: u32, tb: u32) -> vec2<f32> {
  var m = LOW;
  var l = 0.0;
  let first = select(0u, n - WINDOW, WINDOW > 0u && n > WINDOW);
  for (var p = first + p0; p < n; p += step) {
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
