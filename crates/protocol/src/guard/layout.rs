//! The vocabulary of the request layout table (`layouts.rs`, generated from Kafka's message
//! specs): what a field is on the wire and in which versions it is there.
//!
//! A layout describes a message for every version at once; the walker asks each field whether
//! it is present in the version at hand. Which encoding a field uses (classic int16/int32
//! lengths or compact varint lengths, tagged or not) depends on whether the message version is
//! flexible, which is a property of the top-level message and holds for every struct inside it.

/// The largest API version: the upper bound of an open-ended range ("3+").
pub const MAX: i16 = i16::MAX;

/// An inclusive range of versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V(pub i16, pub i16);

impl V {
    /// No version at all (a message that is never flexible).
    pub const NONE: V = V(1, 0);

    pub const fn contains(self, version: i16) -> bool {
        self.0 <= version && version <= self.1
    }
}

/// A field's wire type that is not a struct.
#[allow(dead_code)] // the generator emits every spec type; no supported request has uint/float yet
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prim {
    Bool,
    Int8,
    Int16,
    UInt16,
    Int32,
    UInt32,
    Int64,
    Float64,
    Uuid,
    /// UTF-8 text: int16 length (classic) or varint length + 1 (compact); -1 / 0 is null.
    String,
    /// Opaque bytes: int32 length (classic) or varint length + 1 (compact); -1 / 0 is null.
    Bytes,
    /// A record set: on the wire exactly like `Bytes`.
    Records,
}

impl Prim {
    /// Bytes of a fixed-size type; `None` for the length-prefixed ones.
    pub const fn fixed_size(self) -> Option<usize> {
        match self {
            Prim::Bool | Prim::Int8 => Some(1),
            Prim::Int16 | Prim::UInt16 => Some(2),
            Prim::Int32 | Prim::UInt32 => Some(4),
            Prim::Int64 | Prim::Float64 => Some(8),
            Prim::Uuid => Some(16),
            Prim::String | Prim::Bytes | Prim::Records => None,
        }
    }
}

/// One value: a primitive or a struct.
#[derive(Debug, Clone, Copy)]
pub enum Elem {
    Prim(Prim),
    Struct(&'static Struct),
}

/// A field's type: one value or an array of them (int32 count classic, varint count + 1
/// compact; -1 / 0 is null).
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    One(Elem),
    Array(Elem),
}

/// A struct: the body of a message or a struct nested in one.
#[derive(Debug)]
pub struct Struct {
    /// The spec's name for it (read by tests and in `Debug` output).
    #[allow(dead_code)]
    pub name: &'static str,
    /// In wire order. Tagged fields are listed too; they live in the tagged-field section
    /// at the end of the struct instead of in this order.
    pub fields: &'static [Field],
}

/// One field of a struct.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// Name as kafka-protocol's Rust structs spell it (snake case), for error messages.
    pub name: &'static str,
    pub ty: Ty,
    pub versions: V,
    /// Null is accepted in some version. kafka-protocol decodes such a field into an `Option`
    /// in every version, so the guard accepts null for it in every version too.
    pub nullable: bool,
    /// Tag number of a tagged field (present only in flexible versions, in the tag section).
    pub tag: Option<u32>,
    /// Classic encoding even in flexible versions (the header's client id).
    pub classic: bool,
}

impl Field {
    pub const fn new(name: &'static str, ty: Ty, versions: V) -> Field {
        Field {
            name,
            ty,
            versions,
            nullable: false,
            tag: None,
            classic: false,
        }
    }

    pub const fn nullable(self) -> Field {
        Field {
            nullable: true,
            ..self
        }
    }

    pub const fn tagged(self, tag: u32) -> Field {
        Field {
            tag: Some(tag),
            ..self
        }
    }

    pub const fn classic(self) -> Field {
        Field {
            classic: true,
            ..self
        }
    }
}

/// A top-level message: a request body (by API key) or the request header.
#[derive(Debug)]
pub struct Message {
    /// The API key; -1 for the header.
    pub api_key: i16,
    /// Versions that use the flexible encoding (compact lengths, tagged fields).
    pub flexible: V,
    pub body: &'static Struct,
}
