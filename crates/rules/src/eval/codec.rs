//! The byte form of a [`State`], for snapshots of the runtime's entity table.
//!
//! ```text
//! version: u8 = 1
//! fingerprint: u32 LE     the program's, so a state is never read against another rule
//! started: u8             0: fresh, nothing follows; 1: running
//! last_time_ms: i64 LE
//! flags: one u8 per node  (bits VALUE, SETTLED, PHASE only)
//! times: one i64 LE per slot (leaves and time bounds, in node order)
//! ```
//!
//! The next deadline is not stored: it is derived from the nodes on decode. Decoding checks
//! every length and bit, so any byte string gives a state or an error, never a panic; and a
//! decoded state, whatever its times, is safe to evaluate (the evaluator indexes only by the
//! program's structure).

use super::machine::{ALL_FLAGS, NEVER};
use super::{Program, State};

const VERSION: u8 = 1;

/// Why bytes are not a state of this program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("state ends at byte {at}, {needed} more bytes expected")]
    Truncated { at: usize, needed: usize },
    #[error("state format version {0} is not known (expected {VERSION})")]
    Version(u8),
    #[error(
        "state was made by another rule (fingerprint {found:#010x}, this rule's is {expected:#010x})"
    )]
    OtherRule { found: u32, expected: u32 },
    #[error("state byte {at} is {value:#04x}, not a valid {what}")]
    Invalid {
        at: usize,
        value: u8,
        what: &'static str,
    },
    #[error("state has {0} bytes after its end")]
    Trailing(usize),
}

impl State {
    /// Appends the state's byte form to `out` (layout in the module doc of `codec.rs`). A
    /// fresh state takes 6 bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.extend_from_slice(&self.fingerprint.to_le_bytes());
        out.push(u8::from(self.started));
        if !self.started {
            return;
        }
        out.extend_from_slice(&self.last_time_ms.to_le_bytes());
        out.extend_from_slice(&self.flags);
        for time in &self.times {
            out.extend_from_slice(&time.to_le_bytes());
        }
    }
}

impl Program {
    /// Reads a state written by [`State::encode`] for this same rule. Never panics.
    pub fn decode_state(&self, bytes: &[u8]) -> Result<State, StateError> {
        let mut reader = Reader { bytes, at: 0 };
        let version = reader.u8()?;
        if version != VERSION {
            return Err(StateError::Version(version));
        }
        let found = u32::from_le_bytes(reader.array()?);
        if found != self.fingerprint {
            return Err(StateError::OtherRule {
                found,
                expected: self.fingerprint,
            });
        }
        let mut state = self.new_state();
        let at = reader.at;
        match reader.u8()? {
            0 => {}
            1 => {
                state.started = true;
                state.last_time_ms = i64::from_le_bytes(reader.array()?);
                for flag in state.flags.iter_mut() {
                    let at = reader.at;
                    *flag = reader.u8()?;
                    if *flag & !ALL_FLAGS != 0 {
                        return Err(StateError::Invalid {
                            at,
                            value: *flag,
                            what: "node flag byte",
                        });
                    }
                }
                for time in state.times.iter_mut() {
                    *time = i64::from_le_bytes(reader.array()?);
                }
                state.next_deadline_ms = if state.flags[0] & super::machine::SETTLED != 0 {
                    NEVER
                } else {
                    self.next_deadline(&state, 0)
                };
            }
            value => {
                return Err(StateError::Invalid {
                    at,
                    value,
                    what: "started byte (0 or 1)",
                });
            }
        }
        if reader.at != bytes.len() {
            return Err(StateError::Trailing(bytes.len() - reader.at));
        }
        Ok(state)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, StateError> {
        Ok(self.array::<1>()?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StateError> {
        let rest = &self.bytes[self.at..];
        let Some(chunk) = rest.first_chunk::<N>() else {
            return Err(StateError::Truncated {
                at: self.bytes.len(),
                needed: N - rest.len(),
            });
        };
        self.at += N;
        Ok(*chunk)
    }
}
