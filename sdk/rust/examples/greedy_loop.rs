//! The greedy device loop's epilogue (API.md section 3) as an eta container: the argmax of readout
//! row 0 is put into `token_in` (the next pass embeds it, device to device) and `token_out` (for the
//! host). The runtime binds the channels by name:
//!
//!     cargo run --offline --example greedy_loop > greedy_loop.eta
//!     fwd.epilogue_program(eta.Program.from_bytes(open("greedy_loop.eta", "rb").read()),
//!                          channels={"token_in": token_in, "token_out": token_out})
use piegpu_eta::*;
use std::io::Write;

const VOCAB: u32 = 49152;

fn main() -> Result<(), Error> {
    let prog = trace_with(for_logits(VOCAB, 1), |_| {
        let token_in = channel("token_in", &[1], DType::I32);
        let token_out = channel("token_out", &[1], DType::I32);
        let token = reshape(reduce_argmax(intrinsics::output(0, "logits")), &[1]);
        token_in.put(token);
        token_out.put(token);
    }, &[])?;
    std::io::stdout().write_all(&prog.to_bytes()).expect("stdout");
    eprintln!("greedy_loop: {} nodes, hash {}", prog.nodes.len(), prog.hash());
    Ok(())
}
