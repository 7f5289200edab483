//! Byte sizes as people write them in flags and config files: `512MiB`, `64 MB`, `1048576`.

use std::fmt;
use std::str::FromStr;

/// A size in bytes, parsed from a plain number or a number with a unit: `B`, `KiB`, `MiB`,
/// `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000); case does not
/// matter and a space may stand between number and unit. TOML accepts the same strings or an
/// integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let unit = unit.trim();
        let scale: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kib" | "k" => 1 << 10,
            "mib" | "m" => 1 << 20,
            "gib" | "g" => 1 << 30,
            "tib" | "t" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => {
                return Err(format!(
                    "unknown unit {unit:?} in {text:?}: use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB"
                ));
            }
        };
        let bytes = if number.contains('.') {
            let value: f64 = number
                .parse()
                .map_err(|e| format!("{text:?} is not a size ({e}; e.g. 512MiB)"))?;
            let bytes = value * scale as f64;
            if !(0.0..1.8e19).contains(&bytes) {
                return Err(format!("{text:?} is too large"));
            }
            bytes as u64
        } else {
            let value: u64 = number
                .parse()
                .map_err(|e| format!("{text:?} is not a size ({e}; e.g. 512MiB)"))?;
            value
                .checked_mul(scale)
                .ok_or_else(|| format!("{text:?} is too large"))?
        };
        Ok(ByteSize(bytes))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        for (unit, scale) in UNITS {
            if self.0 >= scale && self.0.is_multiple_of(scale) {
                return write!(f, "{}{unit}", self.0 / scale);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl<'de> serde::Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_refuses_nonsense() {
        for (text, bytes) in [
            ("1048576", 1 << 20),
            ("512MiB", 512 << 20),
            ("256 mib", 256 << 20),
            ("1GiB", 1 << 30),
            ("64MB", 64_000_000),
            ("1.5GiB", 3 << 29),
            ("16k", 16 << 10),
        ] {
            assert_eq!(text.parse::<ByteSize>(), Ok(ByteSize(bytes)), "{text}");
        }
        for bad in ["", "MiB", "12 parsecs", "-1MiB", "99999999999999999999"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad}");
        }
        assert_eq!(ByteSize(512 << 20).to_string(), "512MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
    }

    #[test]
    fn toml_takes_strings_and_integers() {
        #[derive(serde::Deserialize)]
        struct T {
            a: ByteSize,
            b: ByteSize,
        }
        let t: T = toml::from_str("a = \"256MiB\"\nb = 4096").unwrap();
        assert_eq!((t.a, t.b), (ByteSize(256 << 20), ByteSize(4096)));
    }
}
