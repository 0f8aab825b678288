// What the QKV matvec's RoPE + KV-write epilogue (epilogues/rope_kv.wgsl) binds: q, the KV
// pool's layer (KV_WRITE: blocks/kv_write_*.wgsl), the page tables and the RoPE table; TOKEN_AT
// (blocks/token_at_*.wgsl) says where token t of the pass goes: one sequence's tokens, or one token of each
// sequence of a batched decode pass.
@group(0) @binding(3) var<storage, read_write> q: array<vec4<f32>>;
{{KV_WRITE}}
@group(0) @binding(6) var<storage, read> tables: array<u32>;  // page tables (blocks/pages.wgsl)
@group(0) @binding(7) var<storage, read> rope: array<vec4<f32>>;  // [position][HD / 4] (cos, sin, cos, sin)
{{TOKEN_AT}}
const QR: u32 = {{QR}}u;
const KR: u32 = {{KR}}u;
const HD: u32 = {{HD}}u;
//! include blocks/pages
//! include blocks/rope_quad
