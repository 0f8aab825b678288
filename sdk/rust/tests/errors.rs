// Bad input while tracing comes back from trace() as an Err naming the op and the fix, like the
// Python tracer's TraceError/ValidationError.
use piegpu_eta::*;

fn err<O: Outputs>(f: impl FnOnce(&[Tensor]) -> O, specs: &[Spec]) -> Error {
    match trace(f, specs) {
        Ok(p) => panic!("traced without an error:\n{}", p.pretty()),
        Err(e) => e,
    }
}

fn f32s(n: u32) -> Spec {
    spec(&[n], DType::F32)
}

#[track_caller]
fn says(e: &Error, kind: ErrorKind, parts: &[&str]) {
    assert_eq!(e.kind, kind, "{e}");
    for p in parts {
        assert!(e.message.contains(p), "{e:?} lacks {p:?}");
    }
    assert!(e.message.contains("Fix: "), "{e} names no fix");
}

#[test]
fn wrong_shapes_name_the_op_and_the_fix() {
    let e = err(|a| a[0] + a[1], &[f32s(3), f32s(4)]);
    says(&e, ErrorKind::Validation, &["add: cannot broadcast shapes [3] and [4]", "reshape"]);
    let e = err(|a| matmul(a[0], a[1]), &[spec(&[2, 3], DType::F32), spec(&[2, 3], DType::F32)]);
    says(&e, ErrorKind::Validation, &["matmul: matmul takes a[m, k] and b[k, n]"]);
    let e = err(|a| reshape(a[0], &[5]), &[f32s(4)]);
    says(&e, ErrorKind::Validation, &["reshape: cannot reshape f32[4] (4 elements) to [5]"]);
    let e = err(|a| top_k(a[0], 9).0, &[f32s(4)]);
    says(&e, ErrorKind::Validation, &["top_k_idx: k=9 is outside 1..4"]);
    let e = err(|a| a[0], &[spec(&[2, 0], DType::F32)]);
    says(&e, ErrorKind::Validation, &["spec: shape [2, 0] has dimension 0"]);
}

#[test]
fn dtype_mixes_name_the_op_and_the_fix() {
    let e = err(|a| add(a[0], a[1]), &[f32s(3), spec(&[3], DType::I32)]);
    says(&e, ErrorKind::Validation, &["add: dtype mismatch f32[3] vs i32[3]", "cast("]);
    let e = err(|a| a[0] + 0.5, &[spec(&[3], DType::I32)]);
    says(&e, ErrorKind::Validation, &["add: cannot mix the fraction 0.5 with a i32 tensor"]);
    let e = err(|a| exp(a[0]), &[spec(&[3], DType::I32)]);
    says(&e, ErrorKind::Validation, &["exp: needs an f32 input, got i32[3]", "cast(x, dtype.f32)"]);
    let e = err(|a| a[0] & a[1], &[f32s(2), f32s(2)]);
    says(&e, ErrorKind::Validation, &["and_: needs a bool input, got f32[2]"]);
    let e = err(|a| gather(a[0], a[1]), &[f32s(4), f32s(2)]);
    says(&e, ErrorKind::Validation, &["gather: indices must be i32 or u32, got f32[2]"]);
    let e = err(|a| a[0] + true, &[f32s(2)]);
    says(&e, ErrorKind::Validation, &["add: cannot mix the bool true with a f32 tensor"]);
    let e = err(|a| a[0] + (1i64 << 40), &[spec(&[2], DType::I32)]);
    says(&e, ErrorKind::Validation, &["add: 1099511627776 does not fit in 32 bits"]);
}

#[test]
fn a_tensor_used_where_a_rust_bool_is_needed_is_a_trace_error() {
    // `if t { .. }` does not compile; `==` and `<` compile (PartialEq/PartialOrd) and fail at trace time.
    let e = err(|a| if a[0] > a[1] { a[0] } else { a[1] }, &[f32s(2), f32s(2)]);
    says(&e, ErrorKind::Trace, &["<, <=, > or >= on a traced tensor f32[2]", "select(cond, if_true, if_false)"]);
    let e = err(|a| if a[0] == 0.0 { a[0] } else { -a[0] }, &[f32s(2)]);
    says(&e, ErrorKind::Trace, &["== on a traced tensor f32[2]", "a.eq(b)"]);
}

#[test]
fn a_channel_put_of_the_wrong_cell_type_names_the_channel_and_the_cast() {
    let e = err(|a| channel("token_out", &[1], DType::I32).put(reduce_max(a[0])), &[f32s(8)]);
    says(&e, ErrorKind::Validation, &["put into channel \"token_out\": tensor f32[] but its cells are i32[1]", "cast(x, DType::I32)"]);
    let e = err(|a| channel("out", &[3], DType::F32).put(a[0]), &[f32s(2)]);
    says(&e, ErrorKind::Validation, &["put into channel \"out\": tensor f32[2] does not fit cells of shape [3]"]);
    let e = err(|_| {
        channel("x", &[1], DType::I32).put(1);
        channel("x", &[2], DType::I32).put(1);
    }, &[]);
    says(&e, ErrorKind::Trace, &["channel \"x\" is declared twice in this trace, as i32[1] and as i32[2]"]);
    let e = err(|_| channel("a\nb", &[1], DType::I32).put(1), &[]);
    says(&e, ErrorKind::Validation, &["contains the character U+000A"]);
}

#[test]
fn misuse_of_the_trace_itself() {
    let e = err(|a| { let _ = a[0] + 1.0; }, &[f32s(2)]);
    says(&e, ErrorKind::Trace, &["no outputs and no channel puts"]);
    let e = err(|_| intrinsics::output(0, "logits"), &[]);
    says(&e, ErrorKind::Trace, &["intrinsics are only available", "for_logits"]);
    let e = match trace_with(for_logits(16, 1), |_| intrinsics::output(1, "logits"), &[]) {
        Err(e) => e,
        Ok(_) => panic!("row 1 of 1 traced"),
    };
    says(&e, ErrorKind::Validation, &["row 1 out of range"]);
    let mut outer = None;
    trace(|a| { outer = Some(a[0]); a[0] }, &[f32s(2)]).unwrap();
    let e = err(|a| a[0] + outer.unwrap(), &[f32s(2)]);
    says(&e, ErrorKind::Trace, &["belongs to another trace"]);
}

#[test]
fn an_op_outside_a_trace_panics_with_a_trace_error() {
    let payload = std::panic::catch_unwind(|| exp(1.0)).unwrap_err();
    let msg = payload.downcast::<String>().expect("a panic message");
    assert!(msg.starts_with("TraceError: eta ops only work on traced tensors inside trace"), "{msg}");
    assert!(msg.contains("Fix: "), "{msg}");
}

#[test]
fn the_tracer_is_reusable_after_an_error() {
    let _ = err(|a| a[0] + a[1], &[f32s(3), f32s(4)]);
    let p = trace(|a| a[0] * 2.0, &[f32s(4)]).unwrap();
    // docs/container.md section 7's first worked example
    assert_eq!(p.hash(), "c3a8792db4a3a7afda7dc0ebf84f81c049783b0b940f6de68f0c455e99ba0051");
    assert_eq!(p.to_bytes().len(), 118);
}
