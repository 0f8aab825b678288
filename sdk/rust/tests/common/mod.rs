// Shared by the integration tests: the corpus programs and the golden corpus file.
#![allow(dead_code)]

pub mod programs;

/// One program of tests/sdk/golden/corpus.json.
pub struct Golden {
    pub name: String,
    pub hash: String,
    pub bytes: usize,
    pub hex: String,
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let tag = format!("\"{key}\": ");
    let at = line.find(&tag).unwrap_or_else(|| panic!("corpus line without {key}: {line}")) + tag.len();
    let rest = &line[at..];
    if let Some(s) = rest.strip_prefix('"') {
        &s[..s.find('"').unwrap()]
    } else {
        &rest[..rest.find([',', '}']).unwrap()]
    }
}

/// The committed golden corpus (the JSON holds one program per line; no JSON crate is available).
pub fn corpus() -> Vec<Golden> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/sdk/golden/corpus.json");
    let text = std::fs::read_to_string(path).expect("tests/sdk/golden/corpus.json");
    assert!(text.contains("\"format\": \"PIEETA\"") && text.contains("\"version\": 2"), "corpus is not container v2");
    text.lines().filter(|l| l.trim_start().starts_with("{\"name\"")).map(|l| Golden {
        name: field(l, "name").to_string(),
        hash: field(l, "hash").to_string(),
        bytes: field(l, "bytes").parse().unwrap(),
        hex: field(l, "hex").to_string(),
    }).collect()
}

pub fn unhex(h: &str) -> Vec<u8> {
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
}
