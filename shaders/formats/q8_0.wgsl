// Weight format Q8_0 (GGML), read as GGUF stores it: each block of 32 weights is 34
// bytes: f16 d, then 32 signed bytes; weight j is d * q_j. Blocks sit at 2-byte
// alignment: WB = 1 makes the address the block's index (byte offset 34 * index), and
// the 8 words of bytes are joined from 9 loaded words when the block starts mid-word.
// The dot product flips the sign bit of every byte (q + 128, an unsigned byte) and
// subtracts 128 * sum(x): cheaper than sign-extending each byte.
const WB: u32 = 1u;
const BB: u32 = 34u;

fn u32_at(o: u32) -> u32 {  // 4 bytes at an even byte offset
  let i = o >> 2u;
  let lo = w[i];
  let hi = w[i + 1u];
  return select(lo, (lo >> 16u) | (hi << 16u), (o & 2u) != 0u);
}

fn f16_at(o: u32) -> f32 {
  return unpack2x16float(w[o >> 2u] >> ((o & 2u) * 8u)).x;
}

fn ub4(v: u32) -> vec4<f32> {
  return vec4<f32>(f32(v & 255u), f32((v >> 8u) & 255u), f32((v >> 16u) & 255u), f32(v >> 24u));
}

fn sb4(v: u32) -> vec4<f32> {
  return ub4(v ^ 0x80808080u) - 128.0;
}

// Bytes 4j .. 4j+3 of the block at byte o, sign bits flipped.
fn qb(o: u32, j: u32) -> vec4<f32> {
  return ub4(u32_at(o + 2u + 4u * j) ^ 0x80808080u);
}

fn block_dot(wb: u32, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>,
             x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32>, xsum: f32) -> f32 {
  let o = wb * BB;
  let s = qb(o, 0u) * x0 + qb(o, 1u) * x1 + qb(o, 2u) * x2 + qb(o, 3u) * x3
        + qb(o, 4u) * x4 + qb(o, 5u) * x5 + qb(o, 6u) * x6 + qb(o, 7u) * x7;
  return f16_at(o) * ((s.x + s.y + s.z + s.w) - 128.0 * xsum);
}

fn block_decode(wb: u32) -> array<vec4<f32>, 8> {
  let o = wb * BB;
  let d = f16_at(o);
  var out = array<vec4<f32>, 8>();
  for (var j = 0u; j < 8u; j++) {
    out[j] = d * sb4(u32_at(o + 2u + 4u * j));
  }
  return out;
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
