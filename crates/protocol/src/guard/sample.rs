//! Valid request frames built from the layout table, for tests and fuzzers.
//!
//! [`request`] writes a header and body for any supported (api, version) with every field
//! present in that version filled in from a [`Source`] of choices: arrays with a few elements,
//! strings, bytes and records with a few bytes, nullable fields sometimes null, and in flexible
//! versions tagged fields (the known ones of the version, and unknown ones numbered from
//! [`UNKNOWN_TAG_FIRST`]). The frames follow the layout, not `kafka-protocol`, so decoding them with
//! `kafka-protocol` (and re-encoding the result) checks the table against the codec crate; the
//! fuzz targets use them as well-formed starting points to rewrite into hostile ones.

use kafka_protocol::messages::ApiKey;

use super::layout::{Elem, Field, Message, Prim, Struct, Ty};
use super::{layouts, present_fields};

/// Unknown tagged fields get tag numbers from here up, above every tag a supported request
/// knows, so that a decoder keeping them in tag order writes them back in the same order.
pub const UNKNOWN_TAG_FIRST: u32 = 100;

/// Where the choices come from.
pub trait Source {
    /// A number in `0..bound` (`bound` > 0).
    fn below(&mut self, bound: u32) -> u32;
}

/// A small deterministic generator (SplitMix64) for seeded tests.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Source for Rng {
    fn below(&mut self, bound: u32) -> u32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % u64::from(bound)) as u32
    }
}

/// Choices read from a byte string (a fuzzer's input); zeros once it runs out, which makes the
/// rest of the frame as small as the layout allows.
#[derive(Debug, Clone)]
pub struct Bytes<'a>(pub &'a [u8]);

impl Source for Bytes<'_> {
    fn below(&mut self, bound: u32) -> u32 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        u32::from(b) % bound
    }
}

/// A valid frame (header and body, no size prefix) for `api_key` at `version`, or `None` if the
/// table has no layout for it.
pub fn request(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    src: &mut impl Source,
) -> Option<Vec<u8>> {
    let body = layouts::REQUESTS
        .iter()
        .find(|m| m.api_key == api_key as i16)?;
    let mut w = Writer {
        out: Vec::new(),
        version: 0,
        flexible: false,
        src,
    };
    // Header: the fixed prefix is what it must be; the rest comes from the source.
    let header_version = api_key.request_header_version(version);
    w.out.extend_from_slice(&(api_key as i16).to_be_bytes());
    w.out.extend_from_slice(&version.to_be_bytes());
    w.out.extend_from_slice(&correlation_id.to_be_bytes());
    let header = &layouts::REQUEST_HEADER;
    w.version = header_version;
    w.flexible = header.flexible.contains(header_version);
    for field in present_fields(header.body, header_version, w.flexible).skip(3) {
        let compact = w.flexible && !field.classic;
        w.field(field, compact, 0);
    }
    if w.flexible {
        w.tagged_fields(header.body, 0);
    }
    w.message(body, version);
    Some(w.out)
}

/// Encodes `value` in the encoding of `field` and puts it in place of the old length.
pub fn rewrite(frame: &[u8], field: &super::LengthField, value: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(frame.len() + 5);
    out.extend_from_slice(&frame[..field.offset]);
    match field.encoding {
        super::Encoding::Int16 => out.extend_from_slice(&(value as i16).to_be_bytes()),
        super::Encoding::Int32 => out.extend_from_slice(&(value as i32).to_be_bytes()),
        super::Encoding::Varint => put_uvarint(&mut out, value as u32),
    }
    out.extend_from_slice(&frame[field.offset + field.width..]);
    out
}

/// Appends `value` as an unsigned varint.
pub fn put_uvarint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Arrays nested deeper than this get at most one element (keeps frames small).
const DEPTH_WIDE: u32 = 2;

struct Writer<'s, S> {
    out: Vec<u8>,
    version: i16,
    flexible: bool,
    src: &'s mut S,
}

impl<S: Source> Writer<'_, S> {
    fn message(&mut self, message: &Message, version: i16) {
        self.version = version;
        self.flexible = message.flexible.contains(version);
        self.walk_struct(message.body, 0);
    }

    fn walk_struct(&mut self, s: &Struct, depth: u32) {
        let flexible = self.flexible;
        for field in present_fields(s, self.version, flexible) {
            self.field(field, flexible && !field.classic, depth);
        }
        if flexible {
            self.tagged_fields(s, depth);
        }
    }

    fn length(&mut self, kind_string: bool, compact: bool, len: Option<usize>) {
        match (compact, len) {
            (true, None) => put_uvarint(&mut self.out, 0),
            (true, Some(n)) => put_uvarint(&mut self.out, n as u32 + 1),
            (false, None) if kind_string => self.out.extend_from_slice(&(-1i16).to_be_bytes()),
            (false, None) => self.out.extend_from_slice(&(-1i32).to_be_bytes()),
            (false, Some(n)) if kind_string => {
                self.out.extend_from_slice(&(n as i16).to_be_bytes())
            }
            (false, Some(n)) => self.out.extend_from_slice(&(n as i32).to_be_bytes()),
        }
    }

    fn null(&mut self, nullable: bool) -> bool {
        nullable && self.src.below(4) == 3
    }

    fn field(&mut self, field: &Field, compact: bool, depth: u32) {
        match field.ty {
            Ty::One(Elem::Struct(s)) if field.nullable => {
                if self.null(true) {
                    self.out.push(0xff);
                } else {
                    self.out.push(1);
                    self.walk_struct(s, depth + 1);
                }
            }
            Ty::One(elem) => self.value(elem, compact, field.nullable, depth),
            Ty::Array(elem) => {
                if self.null(field.nullable) {
                    self.length(false, compact, None);
                    return;
                }
                let most = if depth >= DEPTH_WIDE { 2 } else { 4 };
                let count = self.src.below(most) as usize;
                self.length(false, compact, Some(count));
                for _ in 0..count {
                    self.value(elem, compact, false, depth + 1);
                }
            }
        }
    }

    fn value(&mut self, elem: Elem, compact: bool, nullable: bool, depth: u32) {
        match elem {
            Elem::Struct(s) => self.walk_struct(s, depth),
            Elem::Prim(p) => match p {
                Prim::Bool => {
                    let b = self.src.below(2) as u8;
                    self.out.push(b);
                }
                Prim::String => {
                    if self.null(nullable) {
                        return self.length(true, compact, None);
                    }
                    let len = self.src.below(9) as usize;
                    self.length(true, compact, Some(len));
                    for _ in 0..len {
                        let c = b'a' + self.src.below(26) as u8;
                        self.out.push(c);
                    }
                }
                Prim::Bytes | Prim::Records => {
                    if self.null(nullable) {
                        return self.length(false, compact, None);
                    }
                    let len = self.src.below(17) as usize;
                    self.length(false, compact, Some(len));
                    for _ in 0..len {
                        let b = self.src.below(256) as u8;
                        self.out.push(b);
                    }
                }
                _ => {
                    let n = p.fixed_size().expect("fixed-size primitive");
                    for _ in 0..n {
                        let b = self.src.below(256) as u8;
                        self.out.push(b);
                    }
                }
            },
        }
    }

    /// The tag section: some known tagged fields of this version (never null: a decoder leaves
    /// out a null tagged field when it writes the message again), then some unknown ones.
    fn tagged_fields(&mut self, s: &Struct, depth: u32) {
        let mut known: [Option<&Field>; 4] = [None; 4];
        let mut n_known = 0;
        for field in s
            .fields
            .iter()
            .filter(|f| f.tag.is_some() && f.versions.contains(self.version))
        {
            if n_known < known.len() && self.src.below(2) == 1 {
                known[n_known] = Some(field);
                n_known += 1;
            }
        }
        known[..n_known].sort_by_key(|f| f.map(|f| f.tag));
        let n_unknown = if self.src.below(4) == 3 { 1 } else { 0 };
        put_uvarint(&mut self.out, (n_known + n_unknown) as u32);
        for field in known[..n_known].iter().flatten() {
            put_uvarint(&mut self.out, field.tag.expect("tagged"));
            let mut value = Writer {
                out: Vec::new(),
                version: self.version,
                flexible: self.flexible,
                src: &mut *self.src,
            };
            let field = Field {
                nullable: false,
                ..**field
            };
            value.field(&field, true, depth + 1);
            let value = value.out;
            put_uvarint(&mut self.out, value.len() as u32);
            self.out.extend_from_slice(&value);
        }
        for i in 0..n_unknown {
            put_uvarint(&mut self.out, UNKNOWN_TAG_FIRST + i as u32);
            let len = self.src.below(6) as usize;
            put_uvarint(&mut self.out, len as u32);
            for _ in 0..len {
                let b = self.src.below(256) as u8;
                self.out.push(b);
            }
        }
    }
}
