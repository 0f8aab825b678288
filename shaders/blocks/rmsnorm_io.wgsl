// The bindings and constants of rmsnorm.wgsl and rmsnorm_lanes.wgsl (model/kernels.py rmsnorm).
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> norm_w: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> rows: vec4<u32>;  // (T, FIRST, OUT0, -): not constants, one kernel for all

const H4: u32 = {{H4}}u;
const EPS: f32 = {{EPS}};
const ADD: bool = {{ADD}};
