// layernorm.wgsl's row for the embeddings: the word row (gathered into h by embed.wgsl) plus the token's position and
// token-type rows; info[t] = (position id, token type id, first token of its text, tokens of its text).
@group(0) @binding(4) var<storage, read> info: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> pos_emb: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> type_emb: array<vec4<f32>>;

fn row_value(t: u32, k: u32) -> vec4<f32> {
  let i = info[t];
  return h[t * H4 + k] + pos_emb[i.x * H4 + k] + type_emb[i.y * H4 + k];
}
