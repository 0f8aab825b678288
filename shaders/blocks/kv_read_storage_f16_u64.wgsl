// Reading the KV pool's buffers of halves (blocks/kv_read_storage_f16.wgsl) through 64-bit words (shader-int64,
// Device.wide_loads: lavapipe), four halves a word (blocks/kv_halves_u64.wgsl): Mesa 22.3's llvmpipe loads a
// storage vector lane by lane and component by component, so a vec4<u64> brings a lane 32 bytes in the loop a
// vec4<u32> spends on 16.
@group(0) @binding({{KC}}) var<storage, read> kc: array<vec4<u64>>;  // [pool row][kv_heads * HD / 16]
@group(0) @binding({{VC}}) var<storage, read> vc: array<vec2<u64>>;  // [pool row][kv_heads * HD / 8]
//! include blocks/kv_halves_u64
