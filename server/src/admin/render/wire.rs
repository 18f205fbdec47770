//! The protobuf wire format, read without a schema: tags, varints, fixed-width
//! values and length-delimited slices. Every overrun or malformed value is an
//! error with the byte offset, never a panic.
//!
//! What it does NOT do: interpret fields (the renderer does, with descriptors).

/// One field occurrence as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Raw<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2 (message, string, bytes, packed repeated).
    Len(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// A cursor over encoded bytes.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, at: 0 }
    }

    pub(super) fn done(&self) -> bool {
        self.at >= self.buf.len()
    }

    pub(super) fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let Some(&b) = self.buf.get(self.at) else {
                return Err(format!("varint cut short at byte {}", self.at));
            };
            self.at += 1;
            if shift == 63 && b > 1 {
                return Err(format!("varint overflows 64 bits at byte {}", self.at - 1));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("varint longer than 10 bytes at byte {}", self.at))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "{n} bytes announced at byte {}, past the end ({})",
                    self.at,
                    self.buf.len()
                )
            })?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    pub(super) fn fixed64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub(super) fn fixed32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next field: its number and raw value.
    pub(super) fn field(&mut self) -> Result<(u32, Raw<'a>), String> {
        let key = self.varint()?;
        let number =
            u32::try_from(key >> 3).map_err(|_| format!("field number {} too large", key >> 3))?;
        if number == 0 {
            return Err(format!("field number 0 at byte {}", self.at));
        }
        let raw = match key & 7 {
            0 => Raw::Varint(self.varint()?),
            1 => Raw::Fixed64(self.fixed64()?),
            2 => {
                let n =
                    usize::try_from(self.varint()?).map_err(|_| "length too large".to_string())?;
                Raw::Len(self.take(n)?)
            }
            5 => Raw::Fixed32(self.fixed32()?),
            w => {
                return Err(format!(
                    "field {number}: wire type {w} (groups) is not supported"
                ));
            }
        };
        Ok((number, raw))
    }
}

/// Standard base64 with padding, as proto3 JSON writes `bytes`.
pub(super) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let mut r = Reader::new(&[0x0a, 0x05, b'a']);
        assert!(r.field().expect_err("short").contains("past the end"));
        let mut r = Reader::new(&[0x08, 0xff]);
        assert!(r.field().expect_err("varint").contains("cut short"));
        let mut r = Reader::new(&[0x0b]);
        assert!(r.field().expect_err("group").contains("groups"));
    }
}
