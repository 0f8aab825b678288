// Fields of blocks that sit at 2-byte alignment in the weight words w (Q4_0, Q5_0, Q8_0, Q6_K):
// a u32 or an f16 at an even byte offset, joined from two words when it starts mid-word.
fn u32_at(o: u32) -> u32 {  // 4 bytes at an even byte offset
  let i = o >> 2u;
  let lo = w[i];
  let hi = w[i + 1u];
  return select(lo, (lo >> 16u) | (hi << 16u), (o & 2u) != 0u);
}

// 4 bytes at byte o + 4k (o even): word (o >> 2) + k and the next, so that consecutive k of one
// field share their loads (u32_at(o + 4k) indexes by (o + 4k) >> 2, which the compilers do not
// see as one word apart; the default model's Q8_0 logits matmul at 8 tokens took 0.70x the time).
fn u32_at_k(o: u32, k: u32) -> u32 {
  let i = (o >> 2u) + k;
  let lo = w[i];
  let hi = w[i + 1u];
  return select(lo, (lo >> 16u) | (hi << 16u), (o & 2u) != 0u);
}

fn f16_at(o: u32) -> f32 {
  return unpack2x16float(w[o >> 2u] >> ((o & 2u) * 8u)).x;
}
