// Fused QKV rows: [q (QR rows) | k (KR rows) | v (KR rows)]. Q and K rows are in
// adjacent-pair order (llama.cpp's layout: rows 2i, 2i+1 of a head rotate together),
// so each pair is rotated here; q goes to its buffer, k and v into the KV page of token t's
// sequence at its position (token_at: the sequence's length before this pass, + t where the pass
// is one sequence's tokens). Called per quad of rows
// (epilogue4: r a multiple of 4, as QR, KR and HD are): a KV texture's texel is written whole.
//! include blocks/rope_kv_io

fn epilogue4(t: u32, r: u32, a: f32, b: f32, c: f32, d: f32) {
  let at = token_at(t);  // (its page-table row, its position)
  let pos = at.y;
  var v = vec4<f32>(a, b, c, d);
  if (r < QR + KR) { v = rope_quad(v, pos, r); }
  if (r < QR) {
    q[(t * QR + r) / 4u] = v;
  } else if (r < QR + KR) {
    k_put((kv_row(at.x, pos) * KR + r - QR) / 4u, v);
  } else {
    v_put((kv_row(at.x, pos) * KR + r - QR - KR) / 4u, v);
  }
}
