// Fused QKV rows: [q (QR rows) | k (KR rows) | v (KR rows)]. Q and K rows are in
// adjacent-pair order (llama.cpp's layout: rows 2i, 2i+1 of a head rotate together),
// so each pair is rotated here; q goes to its buffer, k and v into the sequence's KV page
// of position tables[0] + t (the sequence length before this pass).
@group(0) @binding(3) var<storage, read_write> q: array<f32>;
{{KV_WRITE}}
@group(0) @binding(6) var<storage, read> tables: array<u32>;  // the sequence's page-table row (blocks/pages.wgsl)
@group(0) @binding(7) var<storage, read> rope: array<vec2<f32>>;  // [position][HD / 2] (cos, sin)
const QR: u32 = {{QR}}u;
const KR: u32 = {{KR}}u;
const HD: u32 = {{HD}}u;
//! include blocks/pages

fn epilogue(t: u32, r: u32, a0: f32, b0: f32) {
  let pos = min(tables[0] + t, tables[1] - 1u);  // tables[1]: the working set's positions
  let row = kv_row(0u, pos);
  var a = a0;
  var b = b0;
  if (r < QR + KR) {
    let cs = rope[pos * (HD / 2u) + (r % HD) / 2u];
    a = a0 * cs.x - b0 * cs.y;
    b = b0 * cs.x + a0 * cs.y;
  }
  if (r < QR) {
    q[t * QR + r] = a;
    q[t * QR + r + 1u] = b;
  } else if (r < QR + KR) {
    k_put((row * KR + r - QR) / 2u, vec2<f32>(a, b));  // r and QR are even: one pair
  } else {
    v_put((row * KR + r - QR - KR) / 2u, vec2<f32>(a, b));
  }
}
