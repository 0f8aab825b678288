// The weight matrix of a storage format whose blocks are whole 16-byte units (Q4_K, Q5_K), as vec4s of words:
// lavapipe loads a storage vector in one loop over the lanes, so a block's words come in a quarter of the loads
// that one word at a time takes (a 1536 x 768 Q4_K decode matvec 0.55x the time, bit-equal).
@group(0) @binding(0) var<storage, read> w4: array<vec4<u32>>;
