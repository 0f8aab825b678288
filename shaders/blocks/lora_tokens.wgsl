// The tokens of a pass that run under the adapter in slot `slot` (the value in word 2 of their sequence's
// page-table row; 0: no adapter), in pass order, chunk `chunk` of TB of them: each invocation of a LoRA kernel
// applies one slot's matrices to its tokens, so rows that share an adapter share its loads (the SGMV pattern).
// Needs `seqs` (per sequence: tokens, first token, row, -), `tables`, SEQS and TB.
struct LoraTokens {
  n: u32,
  tok: array<u32, 8>,
  scale: array<f32, 8>,
}

fn lora_tokens(slot: u32, chunk: u32) -> LoraTokens {
  var out: LoraTokens;
  var seen = 0u;
  let first = chunk * TB;
  for (var s = 0u; s < {{SEQS}}u; s++) {
    let row = seqs[s].z;
    let n = seqs[s].x;
    if (tables[row + 2u] != slot || n == 0u) { continue; }
    if (seen + n > first && out.n < TB) {
      let scale = bitcast<f32>(tables[row + 3u]);
      for (var t = max(first, seen) - seen; t < n && out.n < TB; t++) {
        out.tok[out.n] = seqs[s].y + t;
        out.scale[out.n] = scale;
        out.n += 1u;
      }
    }
    seen += n;
    if (out.n == TB) { break; }
  }
  return out;
}
