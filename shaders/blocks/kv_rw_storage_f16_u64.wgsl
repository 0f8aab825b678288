// The KV pool's storage buffers of halves read and written by one kernel (rope_attention_lanes.wgsl) through 64-bit
// words (shader-int64, Device.wide_loads: lavapipe): read as blocks/kv_read_storage_f16_u64.wgsl
// (blocks/kv_halves_u64.wgsl) plus k_put / v_put, which write vec4 j as one word; kv_round(v) is v rounded as stored.
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec4<u64>>;  // [pool row][kv_heads * HD / 16]
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec2<u64>>;  // [pool row][kv_heads * HD / 8]
//! include blocks/kv_halves_u64

fn kv_word(v: vec4<f32>) -> u64 { return u64(pack2x16float(v.xy)) | (u64(pack2x16float(v.zw)) << 32u); }
fn k_put(j: u32, v: vec4<f32>) { kc[j / 4u][j % 4u] = kv_word(v); }
fn v_put(j: u32, v: vec4<f32>) { vc[j / 2u][j % 2u] = kv_word(v); }
fn kv_round(v: vec4<f32>) -> vec4<f32> { return kv_quad(kv_word(v)); }
