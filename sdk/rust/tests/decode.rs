// Program::from_bytes rejects everything but canonical container bytes (docs/container.md section 6).
mod common;

use common::{corpus, unhex};
use piegpu_eta::*;

fn rejected(data: &[u8]) -> Error {
    match Program::from_bytes(data) {
        Ok(p) => panic!("decoded:\n{}", p.pretty()),
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Validation);
            e
        }
    }
}

#[test]
fn truncation_wrong_magic_version_and_trailing_bytes_are_rejected() {
    for g in corpus() {
        let data = unhex(&g.hex);
        // every prefix of the small ones; 150 spread cuts of the big ones (a debug build decodes slowly)
        let step = (data.len() / 150).max(1);
        for n in (0..data.len()).step_by(step).chain([data.len() - 1]) {
            rejected(&data[..n]);
        }
        assert!(rejected(&[b"PIEETB", &data[6..]].concat()).message.contains("magic"));
        assert!(rejected(&[&data[..6], &[1, 0], &data[8..]].concat()).message.contains("version 1"));
        assert!(rejected(&[&data[..], &[0]].concat()).message.contains("trailing"));
    }
}

#[test]
fn bit_flips_are_rejected_or_decode_to_another_canonical_program() {
    let mut state = 0x2545F491u32;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state as usize % n
    };
    let mut decoded = 0;
    for g in corpus() {
        let data = unhex(&g.hex);
        for _ in 0..200 {
            let mut b = data.clone();
            let i = next(b.len());
            b[i] ^= 1 << next(8);
            if let Ok(p) = Program::from_bytes(&b) {
                assert_eq!(p.to_bytes(), b, "{}: a flipped container decoded to other bytes", g.name);
                decoded += 1;
            }
        }
    }
    assert!(decoded < 24 * 200 / 2, "most flips must be rejected, {decoded} decoded");
}

#[test]
fn named_faults_are_reported() {
    let p = trace(|a| exp(a[0]), &[spec(&[2], DType::F32)]).unwrap();
    let data = p.to_bytes();
    let at = data.windows(6).position(|w| w == b"\x05input").unwrap() + 7; // the stored dtype code
    let mut f16 = data.clone();
    f16[at] = 5;
    assert!(rejected(&f16).message.contains("dtype code 5"));
    let mut op = data.clone();
    let e = op.windows(3).position(|w| w == b"exp").unwrap();
    op[e..e + 3].copy_from_slice(b"exq");
    assert!(rejected(&op).message.contains("unknown op \"exq\""));
}
