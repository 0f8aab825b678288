// Reading the KV pool from storage buffers of halves (load_model(kv_dtype="f16")): vec4 i of the layer's K / V is
// two words of two f16 each (pack2x16float, core WGSL: no shader-f16 feature needed), so element t of the
// array<vec4<u32>> view holds vec4s 2t and 2t + 1. k_at(i) / v_at(i) = vec4 i, as in blocks/kv_read_storage.wgsl;
// k_oct(t) / v_oct(t) = both vec4s of element t: one 16-byte load for eight values (the decode attention reads
// whole elements: half the loads).
@group(0) @binding({{KC}}) var<storage, read> kc: array<vec4<u32>>;  // [pool row][kv_heads * HD / 8]
@group(0) @binding({{VC}}) var<storage, read> vc: array<vec4<u32>>;

fn kv_halves(a: u32, b: u32) -> vec4<f32> { return vec4<f32>(unpack2x16float(a), unpack2x16float(b)); }
fn kv_pair(w: vec4<u32>) -> mat2x4<f32> { return mat2x4<f32>(kv_halves(w.x, w.y), kv_halves(w.z, w.w)); }
fn kv_one(w: vec4<u32>, i: u32) -> vec4<f32> {
  return select(kv_halves(w.x, w.y), kv_halves(w.z, w.w), (i & 1u) == 1u);
}
fn k_at(i: u32) -> vec4<f32> { return kv_one(kc[i / 2u], i); }
fn v_at(i: u32) -> vec4<f32> { return kv_one(vc[i / 2u], i); }
fn k_oct(t: u32) -> mat2x4<f32> { return kv_pair(kc[t]); }
fn v_oct(t: u32) -> mat2x4<f32> { return kv_pair(vc[t]); }
fn k_hex(t: u32) -> mat4x4<f32> {  // vec4s 4t .. 4t + 3 (blocks/kv_read_storage_f16_u64.wgsl: one load)
  let a = kv_pair(kc[2u * t]);
  let b = kv_pair(kc[2u * t + 1u]);
  return mat4x4<f32>(a[0], a[1], b[0], b[1]);
}
fn v_touch(i: u32) -> u32 { return vc[i / 2u].x; }  // a word of vec4 i (brings its line into cache)
