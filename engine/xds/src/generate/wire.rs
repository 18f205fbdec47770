//! A minimal protobuf writer for the hottest builder (EDS assignments), which
//! encodes straight into one buffer instead of building prost messages first:
//! an endpoint batch re-encodes thousands of endpoints, and the intermediate
//! messages (a `String` and several nested structs per endpoint, each length
//! computed once per nesting level) were most of its cost.
//!
//! The output must be byte-identical to what prost writes for the same message
//! (fields in tag order, proto3 defaults omitted, set message and oneof fields
//! always written); `eds` tests compare the two.
//!
//! What it does NOT do: decode, or handle anything but varints and
//! length-delimited fields.

/// Wire type of varint fields.
const VARINT: u64 = 0;
/// Wire type of length-delimited fields (strings, bytes, messages).
const LEN: u64 = 2;

/// Bytes of `v` as a varint.
pub(crate) fn varint_len(v: u64) -> usize {
    // 1 byte per started group of 7 bits; 0 takes one byte.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Appends `v` as a varint.
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn key(field: u32, wire_type: u64) -> u64 {
    (u64::from(field) << 3) | wire_type
}

/// Size of a length-delimited field whose payload is `len` bytes.
pub(crate) fn len_field_size(field: u32, len: usize) -> usize {
    varint_len(key(field, LEN)) + varint_len(len as u64) + len
}

/// Size of a string field (0 when empty: proto3 omits it).
pub(crate) fn str_field_size(field: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        len_field_size(field, s.len())
    }
}

/// Size of a varint field that is always written (a oneof member).
pub(crate) fn varint_field_size_always(field: u32, v: u64) -> usize {
    varint_len(key(field, VARINT)) + varint_len(v)
}

/// Size of a plain varint field (0 when zero: proto3 omits it).
pub(crate) fn varint_field_size(field: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        varint_field_size_always(field, v)
    }
}

/// Appends the key and length of a length-delimited field; the caller appends
/// exactly `len` payload bytes next.
pub(crate) fn put_len_header(buf: &mut Vec<u8>, field: u32, len: usize) {
    put_varint(buf, key(field, LEN));
    put_varint(buf, len as u64);
}

/// Appends a string field (nothing when empty).
pub(crate) fn put_str_field(buf: &mut Vec<u8>, field: u32, s: &str) {
    if !s.is_empty() {
        put_len_header(buf, field, s.len());
        buf.extend_from_slice(s.as_bytes());
    }
}

/// Appends a varint field that is always written (a oneof member).
pub(crate) fn put_varint_field_always(buf: &mut Vec<u8>, field: u32, v: u64) {
    put_varint(buf, key(field, VARINT));
    put_varint(buf, v);
}

/// Appends a plain varint field (nothing when zero).
pub(crate) fn put_varint_field(buf: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        put_varint_field_always(buf, field, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_their_length() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v), "{v}");
        }
    }
}
