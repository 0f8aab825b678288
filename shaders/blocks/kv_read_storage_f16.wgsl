// Reading the KV pool from storage buffers of halves (load_model(kv_dtype="f16")): elements of eight halves,
// read through blocks/kv_halves.wgsl (k_at / v_at as in blocks/kv_read_storage.wgsl; k_oct / v_oct: one 16-byte
// load for eight values -- the decode attention reads whole elements: half the loads).
@group(0) @binding({{KC}}) var<storage, read> kc: array<vec4<u32>>;  // [pool row][kv_heads * HD / 8]
@group(0) @binding({{VC}}) var<storage, read> vc: array<vec4<u32>>;
//! include blocks/kv_halves
