//! Top-a sampling as an eta container: the same program as examples/top_a.py's `top_a` (vocab 49152,
//! a = 0.2, temperature 0.8), hence the same bytes, hash and cached kernel.
//!
//!     cargo run --offline --example top_a > top_a.eta
//!     piegpu generate "Once upon a time" --sampler-program top_a.eta --seed 7
//!     piegpu compile top_a.eta --target wgsl
use piegpu_eta::*;
use std::io::Write;

const VOCAB: u32 = 49152;
const A: f64 = 0.2;
const TEMPERATURE: f64 = 0.8;

/// The sampler signature: (logits f32[vocab], state u32[2] = [key, counter]) -> i32 token.
fn top_a(logits: Tensor, state: Tensor) -> Tensor {
    let x = sanitize(logits) * (1.0 / TEMPERATURE);
    let probs = softmax(x);
    let pmax = reduce_max(probs);
    let keep = probs.ge(broadcast(reshape(pmax * pmax * A, &[1]), probs.shape()));
    gumbel_max(mask_apply(x, keep), state)
}

fn main() -> Result<(), Error> {
    let prog = trace(|a| top_a(a[0], a[1]), &[spec(&[VOCAB], DType::F32), spec(&[2], DType::U32)])?;
    std::io::stdout().write_all(&prog.to_bytes()).expect("stdout");
    eprintln!("top_a: {} nodes, hash {}", prog.nodes.len(), prog.hash());
    Ok(())
}
