//! gRPC message framing for the xDS streams, written by hand in both directions
//! so that nothing per stream outlives the message it carried.
//!
//! tonic's codec path keeps, per stream, an encode buffer that grows to the largest
//! response ever sent (the initial CDS/EDS answer) and a decode buffer that grows to
//! the largest request (the EDS subscribe), each for the stream's whole life: at
//! 1,000 services that was ~560 KiB + ~67 KiB per connected proxy. Here:
//!
//! - [`Outbound`] is the response body, over the stream's loop (a `Stream` of
//!   responses, see `service::run_stream`). Each response becomes one exactly sized
//!   `Bytes` (the 5-byte gRPC header + the message), handed to hyper and freed once
//!   written. The stream's final status goes out as the trailers.
//! - [`Inbound`] reads request messages. Its buffer holds only the bytes of a
//!   message still arriving; a complete message leaves as `Bytes` (no copy), and an
//!   emptied buffer gives its allocation back.
//!
//! What it does NOT do: compression (deltapilot neither asks for nor accepts it; a
//! compressed request ends the stream with `UNIMPLEMENTED`), or decoding the
//! messages themselves (see `request` and `encode`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::Stream;
use http_body::Frame;
use http_body_util::BodyExt;
use tonic::Status;
use tonic::codegen::{Body, StdError, http};

use super::encode::WireOut;

/// The gRPC length-prefix: a compression flag byte and a big-endian u32 length.
pub const HEADER_LEN: usize = 5;

/// One response framed for the wire: header plus message in a single allocation
/// of exactly the right size.
pub fn frame(out: &impl WireOut) -> Bytes {
    let len = out.wire_len();
    let mut buf = BytesMut::with_capacity(HEADER_LEN + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    out.wire_encode(&mut buf);
    buf.freeze()
}

/// The trailers that end a stream with `status` (`grpc-status` 0 for a clean end).
fn trailers(status: &Status) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    if status.add_header(&mut h).is_err() {
        // Only a message that cannot be a header value gets here: keep the code.
        h.insert("grpc-status", http::HeaderValue::from(status.code() as i32));
    }
    h
}

/// The response body of one xDS stream: the responses its loop yields, each
/// framed on its own, then the final status as trailers.
pub struct Outbound<O> {
    responses: Pin<Box<dyn Stream<Item = Result<O, Status>> + Send>>,
    done: bool,
}

impl<O> std::fmt::Debug for Outbound<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("done", &self.done)
            .finish()
    }
}

impl<O> Outbound<O> {
    /// The body over `responses`. Their end without an error ends the stream with
    /// `OK`; an `Err` item ends it with that status.
    pub fn new(responses: impl Stream<Item = Result<O, Status>> + Send + 'static) -> Self {
        Outbound {
            responses: Box::pin(responses),
            done: false,
        }
    }
}

impl<O: WireOut> Body for Outbound<O> {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let item = match self.responses.as_mut().poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(item) => item,
        };
        Poll::Ready(Some(Ok(match item {
            Some(Ok(out)) => Frame::data(frame(&out)),
            Some(Err(status)) => {
                self.done = true;
                Frame::trailers(trailers(&status))
            }
            None => {
                self.done = true;
                Frame::trailers(trailers(&Status::ok("")))
            }
        })))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// The response for a stream whose body is `body`: `200`, `application/grpc`.
pub fn response<O: WireOut>(body: Outbound<O>) -> http::Response<tonic::body::Body> {
    let mut resp = http::Response::new(tonic::body::Body::new(body));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    resp
}

/// Reads length-prefixed request messages from a request body.
pub struct Inbound {
    body: tonic::body::Body,
    buf: BytesMut,
    max: usize,
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound")
            .field("buffered", &self.buf.len())
            .field("max", &self.max)
            .finish()
    }
}

impl Inbound {
    /// Messages from `body`; one longer than `max` bytes ends the stream with
    /// `OUT_OF_RANGE`, as tonic's `max_decoding_message_size` does.
    pub fn new<B>(body: B, max: usize) -> Self
    where
        B: Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        let body = body.map_frame(|f| f.map_data(|mut d| d.copy_to_bytes(d.remaining())));
        Inbound {
            body: tonic::body::Body::new(body),
            buf: BytesMut::new(),
            max,
        }
    }

    /// The next complete message, `None` at a clean end of stream. Cancel-safe:
    /// bytes already read stay buffered for the next call.
    pub async fn message(&mut self) -> Result<Option<Bytes>, Status> {
        loop {
            if let Some(m) = self.take()? {
                return Ok(Some(m));
            }
            let next = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            match next {
                None if self.buf.is_empty() => return Ok(None),
                None => {
                    return Err(Status::internal(
                        "request stream ended in the middle of a message",
                    ));
                }
                Some(Err(status)) => return Err(status),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    fn take(&mut self) -> Result<Option<Bytes>, Status> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        if self.buf[0] != 0 {
            return Err(Status::unimplemented(
                "compressed xDS requests are not supported; send them uncompressed",
            ));
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > self.max {
            return Err(Status::out_of_range(format!(
                "request message of {len} bytes is over the limit of {} bytes (--max-request-bytes)",
                self.max
            )));
        }
        let need = HEADER_LEN + len;
        if self.buf.len() < need {
            // One allocation for the whole message, not one per frame.
            self.buf.reserve(need - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(HEADER_LEN);
        let msg = self.buf.split_to(len).freeze();
        if self.buf.is_empty() {
            // Let the allocation go with the message rather than keep it for the
            // stream's life.
            self.buf = BytesMut::new();
        }
        Ok(Some(msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::encode::DeltaOut;
    use deltapilot_xds::ResourceType;
    use http_body_util::{Full, StreamBody};

    fn framed(msgs: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for m in msgs {
            v.push(0);
            v.extend_from_slice(&(m.len() as u32).to_be_bytes());
            v.extend_from_slice(m);
        }
        v
    }

    #[tokio::test]
    async fn messages_split_across_and_within_frames() {
        let wire = framed(&[b"hello", b"", b"world!"]);
        // Feed it in 3-byte frames: headers and messages straddle frame boundaries.
        let chunks: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = wire
            .chunks(3)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let body = StreamBody::new(futures::stream::iter(chunks));
        let mut inb = Inbound::new(body, 100);
        let mut got = Vec::new();
        while let Some(m) = inb.message().await.expect("valid") {
            got.push(m);
        }
        assert_eq!(got, [&b"hello"[..], b"", b"world!"]);
        assert_eq!(inb.buf.capacity(), 0, "nothing kept after the last message");
    }

    #[tokio::test]
    async fn oversized_truncated_and_compressed_are_errors() {
        let mut inb = Inbound::new(Full::new(Bytes::from(framed(&[&[7u8; 11]]))), 10);
        let e = inb.message().await.expect_err("too big");
        assert_eq!(e.code(), tonic::Code::OutOfRange);

        let mut cut = framed(&[b"abcdef"]);
        cut.truncate(8);
        let mut inb = Inbound::new(Full::new(Bytes::from(cut)), 10);
        assert_eq!(
            inb.message().await.expect_err("truncated").code(),
            tonic::Code::Internal
        );

        let mut z = framed(&[b"abc"]);
        z[0] = 1;
        let mut inb = Inbound::new(Full::new(Bytes::from(z)), 10);
        assert_eq!(
            inb.message().await.expect_err("compressed").code(),
            tonic::Code::Unimplemented
        );
    }

    #[tokio::test]
    async fn outbound_frames_each_response_exactly_then_trailers() {
        let out = DeltaOut {
            type_url: Some(ResourceType::Cluster),
            nonce: "1".into(),
            resources: Vec::new(),
            removed: vec!["gone".into()],
        };
        let items = vec![Ok(out.clone()), Err(Status::unavailable("bye"))];
        let mut body = Outbound::new(futures::stream::iter(items));
        let f = body.frame().await.expect("frame").expect("ok");
        let data = f.into_data().expect("data");
        assert_eq!(data.len(), HEADER_LEN + out.encoded_len());
        assert_eq!(data[0], 0);
        assert_eq!(
            u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize,
            out.encoded_len()
        );
        let t = body.frame().await.expect("trailers").expect("ok");
        let t = t.into_trailers().expect("trailers");
        assert_eq!(t["grpc-status"], "14");
        assert!(body.frame().await.is_none());
    }
}
