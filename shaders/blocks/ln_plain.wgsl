// layernorm.wgsl's row: h's own (the residual stream after a block's output was added).
fn row_value(t: u32, k: u32) -> vec4<f32> {
  return h[t * H4 + k];
}
