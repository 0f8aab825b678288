//! The eta Program: SSA nodes, its canonical container bytes (docs/container.md) and content hash.

use crate::error::Error;
use crate::ops::{infer, is_channel, is_committed, op_def, Attr, AttrKind};
use crate::sha256::{hex, sha256};
use crate::types::{check_channel_name, shape_str, DType, TType};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

pub const MAGIC: &[u8; 6] = b"PIEETA";
pub const VERSION: u16 = 2;

/// One SSA node: op name, input node indices, attribute values (op-table order), result type (None for chan_put).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub op: &'static str,
    pub inputs: Vec<u32>,
    pub attrs: Vec<Attr>,
    pub ty: Option<TType>,
}

impl Node {
    /// The attribute `name` (panics when the op has none of that name).
    pub fn attr(&self, name: &str) -> &Attr {
        let def = op_def(self.op).expect("a node's op is in the table");
        let i = def.attrs.iter().position(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("{} has no attribute {name}", self.op));
        &self.attrs[i]
    }
}

/// A channel slot a program declares: its name and cell type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelDecl {
    pub name: String,
    pub cell: TType,
}

/// A traced eta program: nodes, outputs, and the channels it declares (slot order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    pub nodes: Vec<Node>,
    pub outputs: Vec<u32>,
    pub channels: Vec<ChannelDecl>,
}

impl Program {
    /// The canonical container bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    /// Lowercase hex SHA-256 of the canonical bytes: the content hash.
    pub fn hash(&self) -> String {
        hex(&sha256(&self.to_bytes()))
    }

    /// Decode and fully validate container bytes (a ValidationError if anything is off).
    pub fn from_bytes(data: &[u8]) -> Result<Program, Error> {
        decode(data)
    }

    /// The type of each positional input, by index.
    pub fn input_types(&self) -> Vec<TType> {
        let mut ins: Vec<(u32, TType)> = self.nodes.iter().filter(|n| n.op == "input")
            .map(|n| (n.attr("index").int(), n.ty.unwrap())).collect();
        ins.sort_by_key(|(i, _)| *i);
        ins.into_iter().map(|(_, t)| t).collect()
    }

    /// The type of each output.
    pub fn output_types(&self) -> Vec<TType> {
        self.outputs.iter().map(|&i| self.nodes[i as usize].ty.unwrap()).collect()
    }

    /// A readable listing: one `%i = op(%a, %b) {attrs} : type` line per node.
    pub fn pretty(&self) -> String {
        let mut s = String::new();
        for (i, c) in self.channels.iter().enumerate() {
            let _ = writeln!(s, "channel {i} {:?}: {}", c.name, c.cell);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let ins: Vec<String> = n.inputs.iter().map(|j| format!("%{j}")).collect();
            let def = op_def(n.op).unwrap();
            let attrs: Vec<String> = def.attrs.iter().zip(&n.attrs).map(|((name, _), v)| match v {
                Attr::Int(x) => format!("{name}={x}"),
                Attr::DType(d) => format!("{name}={d}"),
                Attr::Shape(sh) => format!("{name}={}", shape_str(sh)),
                Attr::Str(t) => format!("{name}={t:?}"),
            }).collect();
            let _ = write!(s, "%{i} = {}({})", n.op, ins.join(", "));
            if !attrs.is_empty() {
                let _ = write!(s, " {{{}}}", attrs.join(", "));
            }
            if let Some(t) = n.ty {
                let _ = write!(s, " : {t}");
            }
            s.push('\n');
        }
        let outs: Vec<String> = self.outputs.iter().map(|j| format!("%{j}")).collect();
        let _ = write!(s, "return {}", outs.join(", "));
        s
    }
}

// ---- encoding -----------------------------------------------------------------------------------

fn put_type(out: &mut Vec<u8>, t: &TType) {
    out.push(t.dtype.code());
    out.push(t.rank() as u8);
    for d in t.shape() {
        out.extend_from_slice(&d.to_le_bytes());
    }
}

fn put_str16(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Serialize a program to its canonical bytes (docs/container.md section 1).
pub fn encode(prog: &Program) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(prog.channels.len() as u16).to_le_bytes());
    for c in &prog.channels {
        put_str16(&mut out, &c.name);
        put_type(&mut out, &c.cell);
    }
    out.extend_from_slice(&(prog.nodes.len() as u32).to_le_bytes());
    for n in &prog.nodes {
        out.push(n.op.len() as u8);
        out.extend_from_slice(n.op.as_bytes());
        match &n.ty {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                put_type(&mut out, t);
            }
        }
        out.extend_from_slice(&(n.inputs.len() as u16).to_le_bytes());
        for j in &n.inputs {
            out.extend_from_slice(&j.to_le_bytes());
        }
        for a in &n.attrs {
            match a {
                Attr::Int(v) => out.extend_from_slice(&(*v as i64).to_le_bytes()),
                Attr::DType(d) => out.push(d.code()),
                Attr::Shape(s) => {
                    out.push(s.len() as u8);
                    for d in s {
                        out.extend_from_slice(&d.to_le_bytes());
                    }
                }
                Attr::Str(s) => put_str16(&mut out, s),
            }
        }
    }
    out.extend_from_slice(&(prog.outputs.len() as u16).to_le_bytes());
    for j in &prog.outputs {
        out.extend_from_slice(&j.to_le_bytes());
    }
    out
}

// ---- decoding -----------------------------------------------------------------------------------

fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::validation(format!("{what}. Fix: the bytes are corrupt"))
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Error> {
        if self.data.len() - self.pos < n {
            return Err(Error::validation(format!(
                "eta program bytes are truncated: needed {n} bytes for {what} at offset {}, only {} left. \
                 Fix: pass the complete bytes from to_bytes()", self.pos, self.data.len() - self.pos)));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, Error> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, Error> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, Error> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap()))
    }
    fn i64(&mut self, what: &str) -> Result<i64, Error> {
        let b = self.take(8, what)?;
        Ok(i64::from_le_bytes(b.try_into().unwrap()))
    }
    fn utf8(&mut self, n: usize, what: &str) -> Result<String, Error> {
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| corrupt(format!("{what}: the string is not UTF-8")))
    }
    fn dtype(&mut self, what: &str) -> Result<DType, Error> {
        let code = self.u8(what)?;
        DType::from_code(code).ok_or_else(|| corrupt(format!(
            "{what}: dtype code {code} is not one of 1 (f32), 2 (i32), 3 (u32), 4 (bool)")))
    }
    fn shape(&mut self, what: &str) -> Result<Vec<u32>, Error> {
        let rank = self.u8(what)?;
        if rank > 4 {
            return Err(corrupt(format!("rank {rank} > 4 in {what}")));
        }
        (0..rank).map(|_| self.u32(what)).collect()
    }
    fn ttype(&mut self, what: &str) -> Result<TType, Error> {
        let d = self.dtype(what)?;
        let s = self.shape(what)?;
        TType::new(what, d, &s)
    }
}

/// Parse and validate container bytes; everything must re-encode to the same bytes.
pub fn decode(data: &[u8]) -> Result<Program, Error> {
    if data.len() < MAGIC.len() || &data[..MAGIC.len()] != MAGIC {
        let head = String::from_utf8_lossy(&data[..data.len().min(MAGIC.len())]).into_owned();
        return Err(Error::validation(format!(
            "not eta program bytes: magic {head:?} != \"PIEETA\". Fix: pass bytes produced by to_bytes()")));
    }
    let mut r = Reader { data, pos: MAGIC.len() };
    let version = r.u16("version")?;
    if version != VERSION {
        return Err(Error::validation(format!(
            "eta program bytes have version {version}; this SDK reads version {VERSION}. Fix: re-trace the function with this SDK")));
    }
    let n_channels = r.u16("channel count")?;
    let mut channels: Vec<ChannelDecl> = Vec::new();
    for i in 0..n_channels {
        let place = format!("channel {i}");
        let len = r.u16(&place)? as usize;
        let name = r.utf8(len, &place)?;
        check_channel_name(&name, &place)?;
        if let Some(prev) = channels.iter().position(|c| c.name == name) {
            return Err(Error::validation(format!(
                "{place}: name {name:?} is also channel {prev}'s; names are unique. Fix: the bytes are corrupt or come from a broken tracer")));
        }
        let cell = r.ttype(&place)?;
        channels.push(ChannelDecl { name, cell });
    }
    let n_nodes = r.u32("node count")? as usize;
    if n_nodes > data.len() {
        return Err(corrupt(format!("declared {n_nodes} nodes but only {} bytes", data.len())));
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(n_nodes);
    let mut inputs_seen = HashSet::new();
    for i in 0..n_nodes {
        let place = format!("node %{i}");
        let len = r.u8(&place)? as usize;
        let raw = r.take(len, &place)?;
        let name = std::str::from_utf8(raw).ok().filter(|s| s.is_ascii())
            .ok_or_else(|| corrupt(format!("{place}: op name is not ascii")))?;
        let def = op_def(name).ok_or_else(|| Error::validation(format!(
            "{place}: unknown op {name:?}. Fix: the bytes come from a newer or different piegpu, or are corrupt")))?;
        let has_type = r.u8(&place)?;
        if has_type > 1 {
            return Err(corrupt(format!("{place}: bad type flag {has_type}")));
        }
        let stored = if has_type == 1 { Some(r.ttype(&place)?) } else { None };
        let n_in = r.u16(&place)?;
        let mut ins = Vec::with_capacity(n_in as usize);
        for _ in 0..n_in {
            let j = r.u32(&place)?;
            if j as usize >= i || nodes[j as usize].ty.is_none() {
                return Err(corrupt(format!("{place}: input %{j} is not an earlier value node")));
            }
            ins.push(j);
        }
        let mut attrs = Vec::with_capacity(def.attrs.len());
        for (aname, kind) in def.attrs {
            attrs.push(match kind {
                AttrKind::Int => {
                    let v = r.i64(&place)?;
                    if !(0..1i64 << 32).contains(&v) {
                        return Err(corrupt(format!("{place}: attribute {aname} = {v} is outside 0..2^32-1")));
                    }
                    Attr::Int(v as u32)
                }
                AttrKind::DType => Attr::DType(r.dtype(&place)?),
                AttrKind::Shape => Attr::Shape(r.shape(&place)?),
                AttrKind::Str => {
                    let n = r.u16(&place)? as usize;
                    Attr::Str(r.utf8(n, &format!("{place}: attribute {aname}"))?)
                }
            });
        }
        let node = Node { op: def.name, inputs: ins, attrs, ty: stored };
        check_node(i, &node, &nodes, &channels, &mut inputs_seen)?;
        nodes.push(node);
    }
    let n_out = r.u16("output count")?;
    let mut outputs = Vec::with_capacity(n_out as usize);
    for _ in 0..n_out {
        let j = r.u32("outputs")?;
        if j as usize >= nodes.len() || nodes[j as usize].ty.is_none() {
            return Err(corrupt(format!("output %{j} is not a value node")));
        }
        outputs.push(j);
    }
    if r.pos != data.len() {
        return Err(Error::validation(format!(
            "{} trailing bytes after the program. Fix: pass exactly the bytes of one to_bytes()", data.len() - r.pos)));
    }
    let mut seen: Vec<u32> = inputs_seen.into_iter().collect();
    seen.sort_unstable();
    if seen.iter().enumerate().any(|(k, &v)| v as usize != k) {
        return Err(corrupt(format!("input indices {seen:?} are not 0..n-1")));
    }
    check_seqs(&nodes)?;
    let prog = Program { nodes, outputs, channels };
    if encode(&prog) != data {
        return Err(Error::validation(
            "program bytes are not canonical (they decode but re-encode differently). Fix: pass bytes produced by to_bytes()"));
    }
    Ok(prog)
}

fn check_node(i: usize, node: &Node, nodes: &[Node], channels: &[ChannelDecl], inputs_seen: &mut HashSet<u32>) -> Result<(), Error> {
    let place = format!("node %{i} ({})", node.op);
    let ins: Vec<TType> = node.inputs.iter().map(|&j| nodes[j as usize].ty.unwrap()).collect();
    let want = infer(node.op, &ins, &node.attrs)
        .map_err(|e| Error::validation(format!("{place}: {}", e.message)))?;
    if want != node.ty {
        let show = |t: Option<TType>| t.map_or("none".to_string(), |t| t.to_string());
        return Err(corrupt(format!("{place}: stored type {} but the op's rule gives {}", show(node.ty), show(want))));
    }
    if node.op == "input" && !inputs_seen.insert(node.attr("index").int()) {
        return Err(corrupt(format!("{place}: duplicate input index {}", node.attr("index").int())));
    }
    if node.op == "const" && node.attr("dtype").dtype() == DType::Bool && node.attr("bits").int() > 1 {
        return Err(corrupt(format!("{place}: bool constant must be 0 or 1")));
    }
    if is_channel(node.op) {
        let slot = node.attr("slot").int() as usize;
        let cell = channels.get(slot).ok_or_else(|| corrupt(format!(
            "{place}: channel slot {slot} out of range ({} channels)", channels.len())))?.cell;
        let got = if node.op == "chan_put" { ins[0] } else { node.ty.unwrap() };
        if got != cell {
            return Err(corrupt(format!("{place}: value {got} does not match channel {slot}'s cell {cell}")));
        }
    }
    Ok(())
}

/// The takes and the puts of each channel carry seq 0, 1, 2, ... in node order.
fn check_seqs(nodes: &[Node]) -> Result<(), Error> {
    let mut seen: HashMap<(&str, u32), u32> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if !is_committed(n.op) {
            continue;
        }
        let (slot, seq) = (n.attr("slot").int(), n.attr("seq").int());
        let want = seen.entry((n.op, slot)).or_insert(0);
        if seq != *want {
            return Err(corrupt(format!("node %{i} ({}): seq {seq} but this is {} number {want} on channel {slot}", n.op, n.op)));
        }
        *want += 1;
    }
    Ok(())
}
