//! Framing: every Kafka request and response is a 4-byte big-endian size followed by that many
//! bytes.

/// Bytes of the size prefix.
pub const SIZE_PREFIX_BYTES: usize = 4;

/// Why a frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds max_request_bytes ({max})")]
    TooLarge { size: usize, max: usize },
    #[error("frame size {size} is negative or too small to hold a request header")]
    BadSize { size: i32 },
}

/// Smallest possible request: api key (2) + api version (2) + correlation id (4) + client id
/// length (2).
const REQUEST_BYTES_MIN: i32 = 10;

/// Looks at the start of `buf` without allocating. `Ok(Some(n))`: a whole frame of `n` bytes
/// (prefix included) is there. `Ok(None)`: more bytes are needed. `Err`: the size prefix is
/// impossible or over `max_request_bytes`, and the connection should be closed.
pub fn check(buf: &[u8], max_request_bytes: usize) -> Result<Option<usize>, FrameError> {
    let Some(prefix) = buf.get(..SIZE_PREFIX_BYTES) else {
        return Ok(None);
    };
    let size = i32::from_be_bytes(prefix.try_into().expect("4 bytes"));
    if size < REQUEST_BYTES_MIN {
        return Err(FrameError::BadSize { size });
    }
    let size = size as usize;
    if size > max_request_bytes {
        return Err(FrameError::TooLarge {
            size,
            max: max_request_bytes,
        });
    }
    let total = SIZE_PREFIX_BYTES + size;
    Ok((buf.len() >= total).then_some(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_partial_and_bad_frames() {
        let mut frame = 12i32.to_be_bytes().to_vec();
        frame.extend_from_slice(&[0u8; 12]);
        assert_eq!(check(&frame, 100), Ok(Some(16)));
        assert_eq!(check(&frame[..15], 100), Ok(None));
        assert_eq!(check(&frame[..3], 100), Ok(None));
        assert_eq!(
            check(&frame, 11),
            Err(FrameError::TooLarge { size: 12, max: 11 })
        );
        assert_eq!(
            check(&(-1i32).to_be_bytes(), 100),
            Err(FrameError::BadSize { size: -1 })
        );
        // A huge declared size is refused from the prefix alone.
        assert!(check(&i32::MAX.to_be_bytes(), 100 << 20).is_err());
    }
}
