// Reading the KV pool from storage buffers of halves (load_model(kv_dtype="f16")): element i holds
// vec4 i as two words of two f16 each (pack2x16float, core WGSL: no shader-f16 feature needed);
// k_at(i) / v_at(i) = vec4 i of the layer's K / V, as in blocks/kv_read_storage.wgsl.
@group(0) @binding({{KC}}) var<storage, read> kc: array<vec2<u32>>;  // [pool row][kv_heads * HD / 4]
@group(0) @binding({{VC}}) var<storage, read> vc: array<vec2<u32>>;

fn kv_halves(w: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }
fn k_at(i: u32) -> vec4<f32> { return kv_halves(kc[i]); }
fn v_at(i: u32) -> vec4<f32> { return kv_halves(vc[i]); }
