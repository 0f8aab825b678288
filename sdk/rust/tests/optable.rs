// The Rust op table equals the export of piegpu/eta/ops.py (sdk/js/src/optable.json): names, order,
// kinds, arities and attributes; and every op has a type rule.
use piegpu_eta::ops::{infer, AttrKind, OPS};

#[test]
fn the_op_table_matches_the_python_export() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../js/src/optable.json");
    let text = std::fs::read_to_string(path).expect("sdk/js/src/optable.json");
    let rows: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("{\"name\"")).collect();
    assert_eq!(rows.len(), OPS.len(), "ops.py has {} ops, this crate {}", rows.len(), OPS.len());
    for (row, def) in rows.iter().zip(OPS) {
        let kind = |k: &AttrKind| match k { AttrKind::Int => "int", AttrKind::DType => "dtype", AttrKind::Shape => "shape", AttrKind::Str => "str" };
        let attrs: Vec<String> = def.attrs.iter().map(|(n, k)| format!("[\"{n}\", \"{}\"]", kind(k))).collect();
        let arity = def.arity.map_or("null".to_string(), |a| a.to_string());
        let want = format!("{{\"name\": \"{}\", \"kind\": \"{}\", \"arity\": {arity}, \"attrs\": [{}]", def.name, def.kind, attrs.join(", "));
        assert!(row.trim_start().starts_with(&want), "row {row}\nwant {want}");
        // a rule exists: calling it never answers "no type rule"
        if let Err(e) = infer(def.name, &[], &[]) {
            assert!(!e.message.contains("no type rule"), "{}", e.message);
        }
    }
}
