// Weight format Q8_0 (GGML), read as GGUF stores it: each block of 32 weights is 34
// bytes: f16 d, then 32 signed bytes; weight j is d * q_j. Blocks sit at 2-byte
// alignment: WB = 1 makes the address the block's index (byte offset 34 * index), and
// the 8 words of bytes are joined from 9 loaded words when the block starts mid-word.
// The dot product flips the sign bit of every byte (q + 128, an unsigned byte) and
// subtracts 128 * sum(x): cheaper than sign-extending each byte.
//! include blocks/storage_weights
const WB: u32 = 1u;
const BB: u32 = 34u;

//! include blocks/halfwords

//! include blocks/bytes

fn sb4(v: u32) -> vec4<f32> {
  return ub4(v ^ 0x80808080u) - 128.0;
}

// Bytes 4j .. 4j+3 of the block at byte o, sign bits flipped.
fn qb(o: u32, j: u32) -> vec4<f32> {
  return ub4(u32_at_k(o + 2u, j) ^ 0x80808080u);
}

// Word k of the block's bytes from two loaded neighbours: the block starts mid-word (odd) or
// its bytes start mid-word (even).
fn qw(a: u32, b: u32, odd: bool) -> vec4<f32> {
  return ub4(select((a >> 16u) | (b << 16u), b, odd) ^ 0x80808080u);
}

// The decode matvec's inner loop: the block's 34 bytes lie in 9 words, each loaded once. Joining
// halves with u32_at loads 16: the default model's Q8_0 lm_head matvec (49152 x 576) took 10.7 ms
// that way vs 7.8 ms in the former repacked 9-word layout; with 9 loads it is 5-8% slower than that
// layout (alternating runs: 15.0-15.6 vs 12.6-14.7 ms on a busy machine; ~4% of a decode step). A
// branch on the block's parity (uniform: lanes run block b of their rows together) measured slower.
fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let o = wb * BB;
  let i = o >> 2u;
  let odd = (o & 2u) != 0u;  // d in the high half of word i, the bytes word-aligned from word i + 1
  let a0 = w[i];
  let a1 = w[i + 1u];
  let a2 = w[i + 2u];
  let a3 = w[i + 3u];
  let a4 = w[i + 4u];
  let a5 = w[i + 5u];
  let a6 = w[i + 6u];
  let a7 = w[i + 7u];
  let a8 = w[i + 8u];
  let s = qw(a0, a1, odd) * x0 + qw(a1, a2, odd) * x1 + qw(a2, a3, odd) * x2 + qw(a3, a4, odd) * x3
        + qw(a4, a5, odd) * x4 + qw(a5, a6, odd) * x5 + qw(a6, a7, odd) * x6 + qw(a7, a8, odd) * x7;
  let d = unpack2x16float(select(a0, a0 >> 16u, odd)).x;
  return d * ((s.x + s.y + s.z + s.w) - 128.0 * xsum);
}

fn block_decode(wb: u32, j: u32) -> vec4<f32> {
  let o = wb * BB;
  return f16_at(o) * sb4(u32_at_k(o + 2u, j));
}

// The token-tile matmul (matmul.wgsl): raw values of vec4 j of a block as unsigned bytes
// q + 128, and (d, m) with weight = d * (q + 128) + m, m = -128 d.
fn block_q(wb: u32, j: u32) -> vec4<f32> {
  return qb(wb * BB, j);
}

fn block_dm(wb: u32) -> vec2<f32> {
  let d = f16_at(wb * BB);
  return vec2<f32>(d, -128.0 * d);
}
