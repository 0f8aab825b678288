// The constants of every attention shader (model/kernels.py _attention_params): head sizes in vec4s,
// grouped-query heads, the score scale and the sliding window.
const HD4: u32 = {{HD}}u / 4u;
const QR4: u32 = {{QR}}u / 4u;
const KR4: u32 = {{KR}}u / 4u;
const GROUP: u32 = {{GROUP}}u;  // query heads per KV head
const SCALE: f32 = {{SCALE}};   // 1 / sqrt(HD)
const WINDOW: u32 = {{WINDOW}}u;  // sliding window in positions; 0: full causal attention
const LOW: f32 = -3.0e38;       // finite "minus infinity": drivers may assume no inf

// The first position a query that sees positions 0..n-1 attends to: n - WINDOW with a sliding window
// (WINDOW > 0: the query at position n - 1 sees its last WINDOW positions, as transformers' sliding
// mask), else 0.
fn window_start(n: u32) -> u32 { return select(0u, n - WINDOW, WINDOW > 0u && n > WINDOW); }
