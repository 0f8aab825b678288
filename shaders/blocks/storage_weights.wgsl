// The weight matrix of a storage format: GGUF's blocks (or f32/f16 rows) as words, read in place.
@group(0) @binding(0) var<storage, read> w: array<u32>;
