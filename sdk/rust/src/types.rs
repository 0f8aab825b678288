//! Element types, tensor types (TType) and static shapes, as in piegpu/dtypes.py and piegpu/eta/ops.py.

use crate::error::{invalid, Error};
use std::fmt;

pub const MAX_RANK: usize = 4;
pub const MAX_ELEMENTS: u64 = 1 << 30;
pub const MAX_NAME_BYTES: usize = 255;

/// One element type; the discriminant is its byte code in containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32 = 1,
    I32 = 2,
    U32 = 3,
    Bool = 4,
}

impl DType {
    /// The container byte code (1 f32, 2 i32, 3 u32, 4 bool).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The dtype of a container byte code.
    pub fn from_code(code: u8) -> Option<DType> {
        match code {
            1 => Some(DType::F32),
            2 => Some(DType::I32),
            3 => Some(DType::U32),
            4 => Some(DType::Bool),
            _ => None,
        }
    }

    /// "f32", "i32", "u32" or "bool".
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }

    pub fn is_float(self) -> bool {
        self == DType::F32
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32)
    }

    pub fn is_numeric(self) -> bool {
        self != DType::Bool
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The static type of a tensor: dtype and a shape of rank 0..4 (every dim >= 1). Copy, like a tensor handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TType {
    pub dtype: DType,
    rank: u8,
    dims: [u32; MAX_RANK],
}

impl TType {
    /// A type of `dtype` and `shape` (ValidationError naming `op` when the shape is not a valid static shape).
    pub fn new(op: &str, dtype: DType, shape: &[u32]) -> Result<TType, Error> {
        check_shape(op, shape)?;
        let mut dims = [0u32; MAX_RANK];
        dims[..shape.len()].copy_from_slice(shape);
        Ok(TType { dtype, rank: shape.len() as u8, dims })
    }

    pub fn shape(&self) -> &[u32] {
        &self.dims[..self.rank as usize]
    }

    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// Element count.
    pub fn size(&self) -> u64 {
        self.shape().iter().map(|&d| d as u64).product()
    }

    /// The same shape with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> TType {
        TType { dtype, ..*self }
    }
}

impl fmt::Display for TType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, shape_str(self.shape()))
    }
}

impl fmt::Debug for TType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// "[2, 3]".
pub fn shape_str(shape: &[u32]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// Validate a static shape: rank <= 4, every dim >= 1, at most 2^30 elements.
pub fn check_shape(op: &str, shape: &[u32]) -> Result<(), Error> {
    if shape.len() > MAX_RANK {
        return Err(invalid(op, format!("shape {} has rank {} > {MAX_RANK}", shape_str(shape), shape.len()),
                           "reshape to rank 4 or less"));
    }
    if let Some(d) = shape.iter().find(|&&d| d < 1) {
        return Err(invalid(op, format!("shape {} has dimension {d}; dims are static ints >= 1", shape_str(shape)),
                           "use positive dimensions"));
    }
    let n = shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    if n > MAX_ELEMENTS {
        return Err(invalid(op, format!("shape {} has {n} elements (limit {MAX_ELEMENTS})", shape_str(shape)),
                           "split the tensor"));
    }
    Ok(())
}

/// A container's channel name rule: 1..255 bytes of UTF-8, no control characters.
pub fn check_channel_name(name: &str, place: &str) -> Result<(), Error> {
    if let Some(c) = name.chars().find(|&c| (c as u32) < 0x20 || c as u32 == 0x7f) {
        return Err(Error::validation(format!(
            "{place}: channel name {name:?} contains the character U+{:04X}. Fix: use printable characters in channel names",
            c as u32)));
    }
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(Error::validation(format!(
            "{place}: channel name {name:?} is {} bytes of UTF-8; names take 1 to {MAX_NAME_BYTES}. Fix: use a shorter, non-empty name",
            name.len())));
    }
    Ok(())
}
