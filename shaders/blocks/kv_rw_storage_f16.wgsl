// The KV pool's storage buffers of halves read and written by one kernel (rope_attention_lanes.wgsl):
// as blocks/kv_rw_storage.wgsl, each vec4 stored as two words of two f16 (pack2x16float); kv_round(v)
// is v rounded as stored, so a token's own K and V from registers equal what later tokens read.
@group(0) @binding({{KC}}) var<storage, read_write> kc: array<vec2<u32>>;
@group(0) @binding({{VC}}) var<storage, read_write> vc: array<vec2<u32>>;

fn kv_halves(w: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }
fn kv_pack(v: vec4<f32>) -> vec2<u32> { return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }
fn k_at(i: u32) -> vec4<f32> { return kv_halves(kc[i]); }
fn v_at(i: u32) -> vec4<f32> { return kv_halves(vc[i]); }
fn k_put(j: u32, v: vec4<f32>) { kc[j] = kv_pack(v); }
fn v_put(j: u32, v: vec4<f32>) { vc[j] = kv_pack(v); }
fn kv_round(v: vec4<f32>) -> vec4<f32> { return kv_halves(kv_pack(v)); }
fn v_touch(i: u32) -> u32 { return vc[i].x; }  // a word of vec4 i (brings its line into cache)
