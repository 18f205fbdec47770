//! A record as read back from the log, and the one place events are encoded and
//! decoded (with the schema-version check).

use bytes::Bytes;
use deltapilot_proto::{Event, SCHEMA_VERSION};
use prost::Message;

use super::RecordPos;
use crate::{Error, Result};

/// One record: where it sits and the encoded event it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Where the record sits in the log.
    pub pos: RecordPos,
    /// The encoded `deltapilot.events.v1.Event`.
    pub bytes: Bytes,
}

impl Record {
    /// Decodes the event, refusing a schema newer than this build.
    pub fn decode(&self) -> Result<Event> {
        decode_event(&self.bytes, self.pos)
    }
}

/// Encodes an event for the log.
pub fn encode_event(event: &Event) -> Vec<u8> {
    event.encode_to_vec()
}

/// Decodes an event read at `pos`, with a clear error for garbage, a missing schema
/// version, or a schema newer than [`SCHEMA_VERSION`].
pub fn decode_event(bytes: &[u8], pos: RecordPos) -> Result<Event> {
    let event = Event::decode(bytes).map_err(|e| Error::Decode {
        position: pos.to_string(),
        reason: e.to_string(),
    })?;
    if event.schema_version == 0 {
        return Err(Error::Decode {
            position: pos.to_string(),
            reason: "schema_version is 0 (unset); every event must carry one".into(),
        });
    }
    if event.schema_version > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            position: pos.to_string(),
            found: event.schema_version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: RecordPos = RecordPos {
        partition: 0,
        offset: 7,
    };

    #[test]
    fn newer_schema_is_refused_with_position() {
        let e = Event {
            schema_version: SCHEMA_VERSION + 1,
            ..Default::default()
        };
        let err = decode_event(&encode_event(&e), AT).expect_err("newer schema");
        let text = err.to_string();
        assert!(
            text.contains("0:7") && text.contains("schema version"),
            "{text}"
        );
    }

    #[test]
    fn garbage_bytes_are_a_decode_error() {
        let err = decode_event(&[0xff, 0xff, 0xff], AT).expect_err("garbage");
        assert!(matches!(err, Error::Decode { .. }), "{err}");
    }
}
