//! The request guard: checks every length a request frame declares before `kafka-protocol`
//! decodes it.
//!
//! Why it exists: `kafka-protocol`'s array decoders reserve `Vec::with_capacity(declared)` before
//! reading a single element, so one small frame declaring 2^31 - 1 topics made the process abort
//! on a failed allocation. The guard walks the header and body of the frame once, over a
//! borrowed slice, following the wire layout of the request version (from [`layouts`],
//! generated from Kafka's message specs), in both encodings: classic (int16 string lengths,
//! int32 array and bytes lengths, -1 for null) and flexible (varint length + 1, 0 for null,
//! tagged fields). Every declared length is checked against the bytes that remain:
//!
//! - an array may declare at most `remaining / minimum element size` elements (an element takes
//!   at least one byte, usually more: the guard knows each element's smallest encoding);
//! - a string or bytes field may declare at most `remaining` bytes;
//! - a tagged-field section may declare at most `remaining / 2` fields (tag and size take a byte
//!   each), and an unknown tagged field's size at most `remaining` bytes;
//! - lengths below -1, and null where the field cannot be null, are refused.
//!
//! The first violation comes back as a [`Rejection`] naming the field path and the numbers
//! (`topics: declares 2147483647 elements, 4 bytes left`), which `codec::decode_request` turns
//! into `DecodeError::Malformed`. The walk allocates nothing (the path is kept as a fixed stack
//! of static names and indexes and only rendered on rejection).
//!
//! The walk follows exactly the path `kafka-protocol` 0.18's decoders take (varints of at most
//! five bytes, known tagged fields decoded by type whatever size they declare, unknown ones
//! skipped by size, trailing bytes ignored; for ShareFetch and ShareAcknowledge v2, which
//! `kafka-protocol` does not know, the path of [`crate::share_v2`], which is its v1 path with the
//! fixed-size fields v2 adds read in between), so a frame the codec decodes is never refused:
//! a guard that rejected a valid client request would be a worse bug than the crash. The other
//! way round is deliberately loose: the guard only looks at lengths, so a frame it accepts may
//! still fail to decode (bad UTF-8, a tag not valid for the version), which is fine, because
//! every allocation `kafka-protocol` makes is then bounded by bytes that are really there.
//! `tests` below and `tests/hostile_lengths.rs` prove both directions for every supported API
//! and version.

mod layout;
mod layouts;
pub mod sample;
#[cfg(test)]
mod tests;

use std::fmt;

use kafka_protocol::messages::ApiKey;

use layout::{Elem, Field, Message, Prim, Struct, Ty};

/// Deepest nesting of named segments the path keeps (the deepest supported request nests 4).
const PATH_DEPTH_MAX: usize = 8;

/// Why the guard refused a frame: where, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The field path, e.g. `topics[2].partitions`, or `header.client_id`.
    pub path: String,
    pub problem: Problem,
}

/// What was wrong with a declared length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// An array declares more elements than the remaining bytes can hold.
    TooManyElements {
        declared: u64,
        left: usize,
        each_at_least: usize,
    },
    /// A string or bytes field (or an unknown tagged field) declares more bytes than remain.
    TooLong { declared: u64, left: usize },
    /// A classic length below -1.
    Negative { declared: i64 },
    /// Null where the field cannot be null.
    Null,
    /// A tagged-field section declares more fields than the remaining bytes can hold.
    TooManyTaggedFields { declared: u64, left: usize },
    /// The frame ends inside a fixed-size value or a length.
    Truncated { needed: usize, left: usize },
    /// No layout is known for this API (the table in `layouts.rs` needs regenerating).
    UnknownLayout,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path)?;
        match self.problem {
            Problem::TooManyElements {
                declared,
                left,
                each_at_least,
            } => {
                write!(f, "declares {declared} elements, {left} bytes left")?;
                if each_at_least > 1 {
                    write!(f, " (each takes at least {each_at_least})")?;
                }
                Ok(())
            }
            Problem::TooLong { declared, left } => {
                write!(f, "declares {declared} bytes, {left} bytes left")
            }
            Problem::Negative { declared } => write!(f, "declares a negative length ({declared})"),
            Problem::Null => write!(f, "is null, but the field cannot be null"),
            Problem::TooManyTaggedFields { declared, left } => {
                write!(f, "declares {declared} tagged fields, {left} bytes left")
            }
            Problem::Truncated { needed, left } => {
                write!(f, "frame ends early: needs {needed} bytes, {left} left")
            }
            Problem::UnknownLayout => write!(f, "no wire layout is known for this request"),
        }
    }
}

impl std::error::Error for Rejection {}

/// How a length is written on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Classic string length: int16, -1 for null.
    Int16,
    /// Classic array count or bytes length: int32, -1 for null.
    Int32,
    /// Compact length: unsigned varint of length + 1, 0 for null (tag counts and tag sizes:
    /// the plain value).
    Varint,
}

/// What a length counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LengthKind {
    Array,
    String,
    Bytes,
    /// The number of tagged fields in a struct.
    TagCount,
    /// The size of one tagged field. `known`: the field is decoded by its type and this size is
    /// ignored (as `kafka-protocol` does), so no value of it is hostile.
    TagSize {
        known: bool,
    },
}

/// One declared length in a frame, as the walk met it (for tests and fuzzers that rewrite
/// lengths to hostile values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LengthField {
    /// Byte offset of the length in the frame (the frame as `decode_request` gets it: no size
    /// prefix).
    pub offset: usize,
    /// Bytes the length takes on the wire.
    pub width: usize,
    pub encoding: Encoding,
    pub kind: LengthKind,
    /// The raw value as written (for varints: the decoded unsigned value, length + 1).
    pub raw: i64,
    /// The field path.
    pub path: String,
}

/// Checks every length `frame` declares (the frame as `decode_request` gets it: header and
/// body, no size prefix) against what remains. Allocates nothing unless it rejects.
pub fn check(frame: &[u8], api_key: ApiKey, api_version: i16) -> Result<(), Rejection> {
    walk(frame, api_key, api_version, &mut NoVisit)
}

/// Every length field of `frame`, in wire order, or the first violation.
pub fn length_fields(
    frame: &[u8],
    api_key: ApiKey,
    api_version: i16,
) -> Result<Vec<LengthField>, Rejection> {
    let mut collect = Collect(Vec::new());
    walk(frame, api_key, api_version, &mut collect)?;
    Ok(collect.0)
}

/// Every length field a request of `api_key` at `api_version` can carry, as paths with the array
/// indexes left out (`topic_data[].partition_data[].records`, `header.client_id`,
/// `tagged_fields` for a tag section's count and `tagged_fields[]` for an unknown tagged field's
/// size). [`LengthField::path`] with its indexes emptied ([`without_indexes`]) is one of these.
/// For tests that must reach every length.
pub fn length_paths(api_key: ApiKey, api_version: i16) -> Vec<String> {
    fn visit(s: &Struct, version: i16, flexible: bool, prefix: &str, out: &mut Vec<String>) {
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}.{name}")
            }
        };
        let all = s.fields.iter().filter(|f| f.versions.contains(version));
        for field in all {
            let tagged = flexible && field.tag.is_some();
            if field.tag.is_some() && !flexible {
                continue;
            }
            let path = if tagged {
                join(&format!("tagged_fields[].{}", field.name))
            } else {
                join(field.name)
            };
            match field.ty {
                Ty::Array(elem) => {
                    out.push(path.clone());
                    match elem {
                        Elem::Struct(inner) => {
                            visit(inner, version, flexible, &format!("{path}[]"), out)
                        }
                        Elem::Prim(p) if p.fixed_size().is_none() => out.push(format!("{path}[]")),
                        Elem::Prim(_) => {}
                    }
                }
                Ty::One(Elem::Struct(inner)) => visit(inner, version, flexible, &path, out),
                Ty::One(Elem::Prim(p)) if p.fixed_size().is_none() => out.push(path),
                Ty::One(Elem::Prim(_)) => {}
            }
        }
        if flexible {
            out.push(join("tagged_fields"));
            out.push(join("tagged_fields[]"));
        }
    }
    let mut out = Vec::new();
    let header_version = api_key.request_header_version(api_version);
    let header = &layouts::REQUEST_HEADER;
    let flexible = header.flexible.contains(header_version);
    visit(header.body, header_version, flexible, "header", &mut out);
    if let Some(body) = layout(api_key) {
        visit(
            body.body,
            api_version,
            body.flexible.contains(api_version),
            "",
            &mut out,
        );
    }
    out
}

/// `path` with every array index emptied: `topics[3].name` becomes `topics[].name`.
pub fn without_indexes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            c => out.push(c),
        }
    }
    out
}

/// The layout of `api_key`'s request body, if the table has one.
fn layout(api_key: ApiKey) -> Option<&'static Message> {
    layouts::REQUESTS
        .iter()
        .find(|m| m.api_key == api_key as i16)
}

fn walk<V: Visit>(
    frame: &[u8],
    api_key: ApiKey,
    api_version: i16,
    visit: &mut V,
) -> Result<(), Rejection> {
    let mut walker = Walker {
        buf: frame,
        pos: 0,
        version: 0,
        flexible: false,
        path: Path::default(),
        visit,
    };
    let header_version = api_key.request_header_version(api_version);
    let walked = walker
        .message(&layouts::REQUEST_HEADER, header_version, Some("header"))
        .and_then(|()| match layout(api_key) {
            Some(body) => walker.message(body, api_version, None),
            None => Err(walker.reject(Problem::UnknownLayout)),
        });
    walked.map_err(|rejection| *rejection)
}

/// The walk's own result: the rejection boxed, so that the `Result` every step returns stays a
/// word wide on the hot path.
type Walk<T> = Result<T, Box<Rejection>>;

/// Receives each length the walk meets (tests and fuzzers); the guard itself uses [`NoVisit`].
trait Visit {
    fn length(&mut self, field: LengthField);
    /// Whether [`Visit::length`] wants calls (so the guard never builds a `LengthField`).
    const WANTS_LENGTHS: bool;
    /// An array or tag section declares more elements than the bytes can hold: `true` walks on
    /// through as many as there are, as `kafka-protocol` would, instead of refusing (tests use
    /// it to learn how much a refused frame would make the codec reserve).
    fn walk_on(&mut self, _declared: u64) -> bool {
        false
    }
}

struct NoVisit;

impl Visit for NoVisit {
    fn length(&mut self, _: LengthField) {}
    const WANTS_LENGTHS: bool = false;
}

struct Collect(Vec<LengthField>);

/// Walks on past counts the bytes cannot hold and keeps the largest.
struct LargestCount(u64);

impl Visit for LargestCount {
    fn length(&mut self, _: LengthField) {}
    const WANTS_LENGTHS: bool = false;
    fn walk_on(&mut self, declared: u64) -> bool {
        self.0 = self.0.max(declared);
        true
    }
}

/// The largest element count `kafka-protocol` would reserve room for while decoding `frame`: it
/// reserves each array's declared count before reading an element and reads on until the frame
/// ends or a value is bad. For tests and fuzzers that must know whether running the codec on a
/// frame the guard refused is safe.
pub fn largest_count_reserved(frame: &[u8], api_key: ApiKey, api_version: i16) -> u64 {
    let mut largest = LargestCount(0);
    let _ = walk(frame, api_key, api_version, &mut largest);
    largest.0
}

impl Visit for Collect {
    fn length(&mut self, field: LengthField) {
        self.0.push(field);
    }
    const WANTS_LENGTHS: bool = true;
}

/// Where the walk is: a fixed stack of field names, each with the array index inside it.
#[derive(Default)]
struct Path {
    segments: [(&'static str, Option<u32>); PATH_DEPTH_MAX],
    depth: usize,
}

impl Path {
    fn push(&mut self, name: &'static str) {
        if self.depth < PATH_DEPTH_MAX {
            self.segments[self.depth] = (name, None);
        }
        self.depth += 1;
    }

    fn pop(&mut self) {
        self.depth -= 1;
    }

    fn set_index(&mut self, index: u32) {
        if let Some(top) = self.depth.checked_sub(1).filter(|&d| d < PATH_DEPTH_MAX) {
            self.segments[top].1 = Some(index);
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for (i, (name, index)) in self.segments[..self.depth.min(PATH_DEPTH_MAX)]
            .iter()
            .enumerate()
        {
            if i > 0 {
                out.push('.');
            }
            out.push_str(name);
            if let Some(index) = index {
                out.push_str(&format!("[{index}]"));
            }
        }
        if out.is_empty() {
            out.push_str("body");
        }
        out
    }
}

struct Walker<'a, 'v, V> {
    buf: &'a [u8],
    pos: usize,
    /// Version of the message being walked (header or body).
    version: i16,
    /// Whether that version uses the flexible encoding.
    flexible: bool,
    path: Path,
    visit: &'v mut V,
}

/// The smallest number of bytes one value of `elem` takes in `version`.
fn min_size(elem: Elem, version: i16, compact: bool) -> usize {
    match elem {
        Elem::Prim(p) => p.fixed_size().unwrap_or(if compact {
            1
        } else if p == Prim::String {
            2
        } else {
            4
        }),
        Elem::Struct(s) => struct_min_size(s, version, compact),
    }
}

fn struct_min_size(s: &Struct, version: i16, flexible: bool) -> usize {
    let mut total = usize::from(flexible); // the tagged-field count
    for field in present_fields(s, version, flexible) {
        let compact = flexible && !field.classic;
        total += match field.ty {
            Ty::Array(_) => {
                if compact {
                    1
                } else {
                    4
                }
            }
            Ty::One(Elem::Struct(_)) if field.nullable => 1,
            Ty::One(elem) => min_size(elem, version, compact),
        };
    }
    total
}

/// Bytes of one `s` in `version` when every field written in order has a fixed size (the tag
/// section of a flexible version not counted), else `None`.
fn struct_fixed_size(s: &Struct, version: i16, flexible: bool) -> Option<usize> {
    let mut total = 0;
    for field in present_fields(s, version, flexible) {
        match field.ty {
            Ty::One(Elem::Prim(p)) => total += p.fixed_size()?,
            Ty::One(Elem::Struct(inner)) if !flexible && !field.nullable => {
                total += struct_fixed_size(inner, version, flexible)?
            }
            _ => return None,
        }
    }
    Some(total)
}

/// The fields of `s` written in order in `version` (tagged ones live in the tag section).
fn present_fields(s: &Struct, version: i16, flexible: bool) -> impl Iterator<Item = &Field> {
    s.fields
        .iter()
        .filter(move |f| f.versions.contains(version) && !(flexible && f.tag.is_some()))
}

impl<V: Visit> Walker<'_, '_, V> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Out of the hot path: only a refused frame gets here.
    #[cold]
    #[inline(never)]
    fn reject(&self, problem: Problem) -> Box<Rejection> {
        Box::new(Rejection {
            path: self.path.render(),
            problem,
        })
    }

    fn take(&mut self, n: usize) -> Walk<&[u8]> {
        if n > self.left() {
            return Err(self.reject(Problem::Truncated {
                needed: n,
                left: self.left(),
            }));
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..self.pos])
    }

    fn skip(&mut self, n: usize) -> Walk<()> {
        self.take(n).map(|_| ())
    }

    fn i8(&mut self) -> Walk<i8> {
        Ok(self.take(1)?[0] as i8)
    }

    fn i16(&mut self) -> Walk<i16> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Walk<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An unsigned varint exactly as `kafka-protocol` reads one: at most five bytes, bits past
    /// the 32nd dropped, and a continuation bit on the fifth byte ignored.
    fn uvarint(&mut self) -> Walk<u32> {
        let mut value = 0u32;
        for i in 0..5 {
            let b = self.take(1)?[0];
            value |= u32::from(b & 0x7f) << (i * 7);
            if b < 0x80 {
                break;
            }
        }
        Ok(value)
    }

    fn report(&mut self, offset: usize, encoding: Encoding, kind: LengthKind, raw: i64) {
        if V::WANTS_LENGTHS {
            let field = LengthField {
                offset,
                width: self.pos - offset,
                encoding,
                kind,
                raw,
                path: self.path.render(),
            };
            self.visit.length(field);
        }
    }

    /// Reads a length prefix: `Ok(None)` for null, else the declared length.
    fn length(&mut self, kind: LengthKind, compact: bool, nullable: bool) -> Walk<Option<u64>> {
        let offset = self.pos;
        let declared: i64 = if compact {
            let raw = self.uvarint()?;
            self.report(offset, Encoding::Varint, kind, i64::from(raw));
            i64::from(raw) - 1
        } else if kind == LengthKind::String {
            let raw = self.i16()?;
            self.report(offset, Encoding::Int16, kind, i64::from(raw));
            i64::from(raw)
        } else {
            let raw = self.i32()?;
            self.report(offset, Encoding::Int32, kind, i64::from(raw));
            i64::from(raw)
        };
        match declared {
            -1 if nullable => Ok(None),
            -1 => Err(self.reject(Problem::Null)),
            n if n < -1 => Err(self.reject(Problem::Negative { declared: n })),
            n => Ok(Some(n as u64)),
        }
    }

    fn message(
        &mut self,
        message: &'static Message,
        version: i16,
        name: Option<&'static str>,
    ) -> Walk<()> {
        self.version = version;
        self.flexible = message.flexible.contains(version);
        if let Some(name) = name {
            self.path.push(name);
        }
        self.walk_struct(message.body)?;
        if name.is_some() {
            self.path.pop();
        }
        Ok(())
    }

    fn walk_struct(&mut self, s: &'static Struct) -> Walk<()> {
        let (version, flexible) = (self.version, self.flexible);
        // Runs of fixed-size fields are skipped at once (one bounds check, no dispatch each).
        let mut fixed = 0;
        for field in present_fields(s, version, flexible) {
            if let Ty::One(Elem::Prim(p)) = field.ty
                && let Some(n) = p.fixed_size()
            {
                fixed += n;
                continue;
            }
            self.skip(fixed)?;
            fixed = 0;
            self.path.push(field.name);
            self.field(field, flexible && !field.classic)?;
            self.path.pop();
        }
        self.skip(fixed)?;
        if flexible {
            self.tagged_fields(s)?;
        }
        Ok(())
    }

    fn field(&mut self, field: &Field, compact: bool) -> Walk<()> {
        match field.ty {
            Ty::One(Elem::Struct(s)) if field.nullable => {
                // kafka-protocol: presence byte, the struct follows only when it is 1.
                if self.i8()? == 1 {
                    self.walk_struct(s)?;
                }
                Ok(())
            }
            Ty::One(elem) => self.value(elem, compact, field.nullable),
            Ty::Array(elem) => self.array(elem, compact, field.nullable),
        }
    }

    fn value(&mut self, elem: Elem, compact: bool, nullable: bool) -> Walk<()> {
        match elem {
            Elem::Struct(s) => self.walk_struct(s),
            Elem::Prim(p) => match p.fixed_size() {
                Some(n) => self.skip(n),
                None => {
                    let kind = if p == Prim::String {
                        LengthKind::String
                    } else {
                        LengthKind::Bytes
                    };
                    if let Some(len) = self.length(kind, compact, nullable)? {
                        if len > self.left() as u64 {
                            return Err(self.reject(Problem::TooLong {
                                declared: len,
                                left: self.left(),
                            }));
                        }
                        self.pos += len as usize;
                    }
                    Ok(())
                }
            },
        }
    }

    fn array(&mut self, elem: Elem, compact: bool, nullable: bool) -> Walk<()> {
        let Some(count) = self.length(LengthKind::Array, compact, nullable)? else {
            return Ok(());
        };
        // The smallest element, and the size of every element when all are the same.
        let (each, fixed) = match elem {
            Elem::Prim(p) => (min_size(elem, self.version, compact), p.fixed_size()),
            Elem::Struct(s) => {
                let fixed = struct_fixed_size(s, self.version, compact);
                let min = match fixed {
                    Some(n) if !compact => n,
                    _ => struct_min_size(s, self.version, compact),
                };
                (min, fixed)
            }
        };
        let each = each.max(1);
        let left = self.left();
        if count > (left / each) as u64 && !self.visit.walk_on(count) {
            return Err(self.reject(Problem::TooManyElements {
                declared: count,
                left,
                each_at_least: each,
            }));
        }
        match (elem, fixed) {
            // Fixed-size elements: checked all at once (the count fits in a u32).
            (Elem::Prim(_), Some(_)) => {
                self.skip(count as usize * each)?;
            }
            // Structs of fixed-size fields (most partition entries): in classic versions the
            // whole array at once; in flexible ones the fields at once, then the tag section.
            (Elem::Struct(s), Some(fixed)) => {
                if !self.flexible {
                    self.skip(count as usize * fixed)?;
                } else {
                    for i in 0..count {
                        self.path.set_index(i as u32);
                        self.skip(fixed)?;
                        self.tagged_fields(s)?;
                    }
                }
            }
            _ => {
                for i in 0..count {
                    self.path.set_index(i as u32);
                    self.value(elem, compact, false)?;
                }
            }
        }
        Ok(())
    }

    fn tagged_fields(&mut self, s: &'static Struct) -> Walk<()> {
        // The usual case, an empty section: one zero byte.
        if !V::WANTS_LENGTHS && self.buf.get(self.pos) == Some(&0) {
            self.pos += 1;
            return Ok(());
        }
        self.path.push("tagged_fields");
        let offset = self.pos;
        let count = self.uvarint()?;
        self.report(
            offset,
            Encoding::Varint,
            LengthKind::TagCount,
            i64::from(count),
        );
        // Each tagged field takes at least a tag byte and a size byte.
        if u64::from(count) > (self.left() / 2) as u64 && !self.visit.walk_on(u64::from(count)) {
            return Err(self.reject(Problem::TooManyTaggedFields {
                declared: u64::from(count),
                left: self.left(),
            }));
        }
        for i in 0..count {
            self.path.set_index(i);
            let tag = self.uvarint()?;
            let known = s
                .fields
                .iter()
                .find(|f| f.tag == Some(tag) && f.versions.contains(self.version));
            let offset = self.pos;
            let size = self.uvarint()?;
            self.report(
                offset,
                Encoding::Varint,
                LengthKind::TagSize {
                    known: known.is_some(),
                },
                i64::from(size),
            );
            match known {
                // Decoded by its type; the declared size is not used (kafka-protocol).
                Some(field) => {
                    self.path.push(field.name);
                    self.field(field, true)?;
                    self.path.pop();
                }
                None => {
                    if size as usize > self.left() {
                        return Err(self.reject(Problem::TooLong {
                            declared: u64::from(size),
                            left: self.left(),
                        }));
                    }
                    self.pos += size as usize;
                }
            }
        }
        self.path.pop();
        Ok(())
    }
}
