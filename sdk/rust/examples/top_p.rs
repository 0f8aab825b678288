//! Top-p (nucleus) sampling as an eta container: the same program as piegpu's
//! `samplers.top_p(0.9, 0.8).sample` (what `piegpu generate --sampler top-p --top-p 0.9 --temperature 0.8` draws with).
//!
//!     cargo run --offline --example top_p > top_p.eta
//!     piegpu generate "Once upon a time" --sampler-program top_p.eta --seed 7
use piegpu_eta::*;
use std::io::Write;

const VOCAB: u32 = 49152;
const P: f64 = 0.9;
const TEMPERATURE: f64 = 0.8;
const F32_MAX: f64 = 3.4028234663852886e38;

/// (logits f32[vocab], state u32[2]) -> i32 token: temperature, top-p mask, Gumbel-max draw.
fn top_p(logits: Tensor, state: Tensor) -> Tensor {
    let x = sanitize(logits) * (1.0 / TEMPERATURE);
    let x = minimum(x, F32_MAX); // +inf logits stay the largest finite value, so softmax stays defined
    let x = mask_apply(x, top_p_mask(x, P));
    gumbel_max(x, state)
}

fn main() -> Result<(), Error> {
    let prog = trace(|a| top_p(a[0], a[1]), &[spec(&[VOCAB], DType::F32), spec(&[2], DType::U32)])?;
    std::io::stdout().write_all(&prog.to_bytes()).expect("stdout");
    eprintln!("top_p: {} nodes, hash {}", prog.nodes.len(), prog.hash());
    Ok(())
}
