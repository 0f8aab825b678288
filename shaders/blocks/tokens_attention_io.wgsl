// The bindings of the prefill attentions of one sequence (attention_tokens.wgsl, attention_lanes.wgsl;
// model/kernels.py attention binds them).
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;   // [T][heads * HD]
// bindings 1 and 2: the layer's K and V (blocks/kv_read_storage.wgsl or kv_read_texture.wgsl)
{{KV}}
@group(0) @binding(3) var<storage, read> tables: array<u32>;  // this sequence's page-table row (blocks/pages.wgsl)
@group(0) @binding(4) var<storage, read_write> o: array<vec4<f32>>;  // [T][heads * HD]
@group(0) @binding(5) var<uniform> seq: vec4<u32>;  // (tokens of this sequence, its first token in the pass, -, -)
