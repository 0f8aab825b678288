//! Print the Rust-traced golden corpus programs as JSON {name: container hex}
//! (tests/sdk/test_rust_containers.py runs it: the Python decoder checks and mutates Rust-made bytes).
#[path = "../tests/common/programs.rs"]
mod programs;

fn main() {
    let mut parts = Vec::new();
    for (name, build) in programs::programs() {
        let prog = build().unwrap_or_else(|e| panic!("{name}: {e}"));
        parts.push(format!("\"{name}\": \"{}\"", piegpu_eta::sha256::hex(&prog.to_bytes())));
    }
    println!("{{{}}}", parts.join(", "));
}
