// The Rust tracer's version of every golden program gives the committed bytes and hash, and every
// golden container decodes and re-encodes to the same bytes.
mod common;

use common::{corpus, programs::programs, unhex};
use piegpu_eta::sha256::hex;
use piegpu_eta::*;

#[test]
fn the_corpus_has_at_least_15_programs_and_the_same_names_as_ours() {
    let golden = corpus();
    assert!(golden.len() >= 15);
    let mut ours: Vec<&str> = programs().iter().map(|(n, _)| *n).collect();
    let mut theirs: Vec<&str> = golden.iter().map(|g| g.name.as_str()).collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs, "tests/common/programs.rs and tests/sdk/programs.py must define the same programs");
}

#[test]
fn traced_in_rust_every_program_matches_every_byte_and_the_hash() {
    let golden = corpus();
    for (name, build) in programs() {
        let g = golden.iter().find(|g| g.name == name).unwrap();
        let prog = build().unwrap_or_else(|e| panic!("{name}: {e}"));
        let bytes = prog.to_bytes();
        assert_eq!(bytes.len(), g.bytes, "{name}: length");
        assert_eq!(hex(&bytes), g.hex, "{name}: bytes differ\n{}", prog.pretty());
        assert_eq!(prog.hash(), g.hash, "{name}: hash");
    }
}

#[test]
fn decoded_in_rust_every_golden_container_re_encodes_to_the_same_bytes() {
    for g in corpus() {
        let data = unhex(&g.hex);
        let prog = Program::from_bytes(&data).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        assert_eq!(prog.to_bytes(), data, "{}", g.name);
        assert_eq!(prog.hash(), g.hash, "{}", g.name);
    }
}

#[test]
fn channels_keep_their_names_and_cell_types_through_a_round_trip() {
    let g = corpus().into_iter().find(|g| g.name == "channels").unwrap();
    let prog = Program::from_bytes(&unhex(&g.hex)).unwrap();
    let names: Vec<String> = prog.channels.iter().map(|c| format!("{}:{}", c.name, c.cell)).collect();
    assert_eq!(names, ["counter:i32[1]", "chan1:f32[2]", "params:f32[3]", "out:f32[2]"]);
    assert!(prog.pretty().contains("channel 0 \"counter\": i32[1]"));
}
