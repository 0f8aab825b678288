//! piegpu eta tracer for Rust: trace device epilogues (samplers, device loops) into eta containers
//! whose bytes and content hash equal the Python and JavaScript tracers' for the same program
//! (docs/container.md). std only.
//!
//! ```
//! use piegpu_eta::*;
//! let prog = trace(|a| gumbel_max(a[0] * 1.25, a[1]), &[spec(&[16], DType::F32), spec(&[2], DType::U32)]).unwrap();
//! assert_eq!(Program::from_bytes(&prog.to_bytes()).unwrap().hash(), prog.hash());
//! ```
//!
//! Errors: a traced function's mistakes (wrong shapes, dtype mixes, `==`/`<` on a tensor, a put of
//! the wrong cell type) make `trace` return `Err(Error)` whose message names the op and the fix
//! (internally the op panics with the Error and `trace` catches it; nothing is printed). An op called
//! outside any trace panics with the TraceError's text.

pub mod api;
pub mod composites;
pub mod error;
pub mod ops;
pub mod program;
pub mod sha256;
pub mod tracer;
pub mod types;

pub use api::*;
pub use composites::*;
pub use error::{Error, ErrorKind};
pub use ops::{Attr, OPS};
pub use program::{ChannelDecl, Node, Program, MAGIC, VERSION};
pub use tracer::{channel, constant, for_logits, intrinsics, spec, trace, trace_with, Channel, Context, Operand, Outputs,
                 Spec, Tensor, Value};
pub use types::{DType, TType};
