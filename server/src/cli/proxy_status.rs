//! `deltapilot proxy-status` and `deltapilot proxy-config`: the live server's view
//! of its proxies, istioctl style, read from the admin server's debug endpoints.
//!
//! - `proxy-status`: one row per connected proxy (per xDS stream) with SYNCED,
//!   STALE, NACKED or NOT SENT for each type (from `/debug/syncz`, which defines
//!   them), how many changes it is behind, and the text of any NACK.
//! - `proxy-config ID [--type cds,eds]`: what that proxy should hold now, in
//!   Envoy's `config_dump` format (from `/debug/config_dump`); an unknown id is an
//!   error naming the connected ones.
//!
//! The admin server listens on loopback by default; `--admin-addr` (and
//! `DELTAPILOT_ADMIN_ADDR`, shared with `deltapilot run`) says where.
//!
//! What it does NOT do: talk to the proxies themselves (it shows what the server
//! sent and what they ACKed).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bound on connecting to the admin server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on the whole request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer accepted (a config dump of a large mesh is tens of MB).
const MAX_BODY: usize = 512 * 1024 * 1024;

/// Arguments of `deltapilot proxy-status`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProxyStatusArgs {
    /// The admin server of `deltapilot run` (its /debug/* token, if it has
    /// one, is read from the file DELTAPILOT_ADMIN_TOKEN_FILE names).
    #[arg(long, env = "DELTAPILOT_ADMIN_ADDR", default_value = "127.0.0.1:15014")]
    admin_addr: SocketAddr,
    /// Print the raw `/debug/syncz` JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `deltapilot proxy-config`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProxyConfigArgs {
    /// The proxy's node id (as `proxy-status` lists it).
    id: String,
    /// Only these types: `cds`, `eds`, `lds`, `rds` (comma-separated).
    #[arg(long = "type", value_name = "TYPES")]
    types: Option<String>,
    /// The admin server of `deltapilot run` (its /debug/* token, if it has
    /// one, is read from the file DELTAPILOT_ADMIN_TOKEN_FILE names).
    #[arg(long, env = "DELTAPILOT_ADMIN_ADDR", default_value = "127.0.0.1:15014")]
    admin_addr: SocketAddr,
}

/// The variable naming the admin token file: the server's own
/// (`--admin-token-file`), so these commands run inside its pod just work.
const TOKEN_FILE_VAR: &str = "DELTAPILOT_ADMIN_TOKEN_FILE";

/// The bearer token for `/debug/*`, from the file `DELTAPILOT_ADMIN_TOKEN_FILE`
/// names, if it is set.
fn admin_token() -> anyhow::Result<Option<String>> {
    let Some(path) = std::env::var_os(TOKEN_FILE_VAR).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{TOKEN_FILE_VAR}={}: cannot read the admin token",
            std::path::Path::new(&path).display()
        )
    })?;
    let token = text.trim();
    if token.is_empty() {
        bail!(
            "{TOKEN_FILE_VAR}={}: holds no token (the file is empty)",
            std::path::Path::new(&path).display()
        );
    }
    Ok(Some(token.to_owned()))
}

/// A GET against the admin server: status and body.
async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    request(addr, "GET", path, None).await
}

/// A request against the admin server (`body`: a protobuf payload to POST):
/// status and body.
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> anyhow::Result<(u16, Vec<u8>)> {
    let unreachable = || {
        format!(
            "cannot reach the admin server at {addr} (is `deltapilot run` running? see --admin-addr)"
        )
    };
    let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .with_context(unreachable)?
        .with_context(unreachable)?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\n"
    )
    .into_bytes();
    if let Some(b) = body {
        request.extend_from_slice(
            format!(
                "Content-Type: application/x-protobuf\r\nContent-Length: {}\r\n",
                b.len()
            )
            .as_bytes(),
        );
    }
    if let Some(token) = admin_token()? {
        request.extend_from_slice(format!("Authorization: Bearer {token}\r\n").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(body.unwrap_or_default());
    let mut raw = Vec::new();
    tokio::time::timeout(REQUEST_TIMEOUT, async {
        conn.write_all(&request).await?;
        (&mut conn)
            .take(MAX_BODY as u64)
            .read_to_end(&mut raw)
            .await
    })
    .await
    .with_context(|| {
        format!("the admin server at {addr} did not answer {path} within {REQUEST_TIMEOUT:?}")
    })?
    .with_context(|| format!("{method} {path} at {addr}"))?;
    parse_response(&raw)
        .with_context(|| format!("{method} {path} at {addr}: malformed HTTP response"))
}

/// Splits an HTTP/1.1 response into status and body (content-length, chunked, or
/// to the end of the connection).
fn parse_response(raw: &[u8]) -> anyhow::Result<(u16, Vec<u8>)> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).context("headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("no status code")?;
    let mut chunked = false;
    let mut length = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
        } else if k == "content-length" {
            length = v.parse::<usize>().ok();
        }
    }
    let body = &raw[end + 4..];
    if chunked {
        let mut out = Vec::new();
        let mut rest = body;
        loop {
            let nl = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .context("chunk size line")?;
            let size_text = std::str::from_utf8(&rest[..nl]).context("chunk size")?;
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .context("chunk size")?;
            rest = &rest[nl + 2..];
            if size == 0 {
                break;
            }
            anyhow::ensure!(rest.len() >= size, "chunk cut short");
            out.extend_from_slice(&rest[..size]);
            rest = rest.get(size + 2..).unwrap_or(&[]);
        }
        return Ok((status, out));
    }
    Ok((
        status,
        match length {
            Some(n) => body
                .get(..n)
                .context("body shorter than its content-length")?
                .to_vec(),
            None => body.to_vec(),
        },
    ))
}

/// The server's `{"error": …}` message, or the body as text.
fn server_error(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct E {
        error: String,
    }
    serde_json::from_slice::<E>(body)
        .map(|e| e.error)
        .unwrap_or_else(|_| String::from_utf8_lossy(body).trim().to_owned())
}

#[derive(Debug, Deserialize)]
struct TypeView {
    status: String,
    last_nack: Option<String>,
    behind: Behind,
}

#[derive(Debug, Deserialize)]
struct Behind {
    changes: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ProxyView {
    id: Option<String>,
    proxy_type: Option<String>,
    #[serde(default)]
    view_key: Option<String>,
    api: String,
    stream: u64,
    types: std::collections::BTreeMap<String, TypeView>,
}

#[derive(Debug, Deserialize)]
struct Syncz {
    snapshot_seq: u64,
    snapshot_position: String,
    proxies: Vec<ProxyView>,
}

/// The `proxy-status` table.
fn table(s: &Syncz) -> String {
    let mut rows = vec![vec![
        "NAME".to_string(),
        "TYPE".into(),
        "VIEW".into(),
        "API".into(),
        "CDS".into(),
        "EDS".into(),
        "LDS".into(),
        "RDS".into(),
        "BEHIND".into(),
    ]];
    let mut nacks = Vec::new();
    for p in &s.proxies {
        let name =
            p.id.clone()
                .unwrap_or_else(|| format!("(stream {}, no node yet)", p.stream));
        let mut row = vec![
            name.clone(),
            p.proxy_type.clone().unwrap_or_else(|| "-".into()),
            p.view_key.clone().unwrap_or_else(|| "-".into()),
            p.api.clone(),
        ];
        let mut behind: Option<u64> = Some(0);
        for t in ["cds", "eds", "lds", "rds"] {
            match p.types.get(t) {
                Some(v) => {
                    row.push(v.status.replace('_', " "));
                    match (v.status.as_str(), v.behind.changes) {
                        ("NOT_SENT", _) => {}
                        (_, Some(c)) => behind = behind.map(|b| b + c),
                        ("SYNCED", None) => {}
                        (_, None) => behind = None,
                    }
                    if let Some(n) = &v.last_nack {
                        nacks.push(format!("{name} {t}: {n}"));
                    }
                }
                None => row.push("-".into()),
            }
        }
        row.push(behind.map_or_else(|| "?".into(), |b| b.to_string()));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "{} stream(s); snapshot {} at log position {}\n",
        s.proxies.len(),
        s.snapshot_seq,
        s.snapshot_position
    ));
    for n in nacks {
        out.push_str(&format!("NACK {n}\n"));
    }
    out
}

fn print(text: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}

/// Runs `deltapilot proxy-status`.
pub(crate) async fn status(args: ProxyStatusArgs) -> anyhow::Result<()> {
    let (code, body) = get(args.admin_addr, "/debug/syncz").await?;
    if code != 200 {
        bail!("/debug/syncz answered {code}: {}", server_error(&body));
    }
    if args.json {
        return print(&body);
    }
    let s: Syncz = serde_json::from_slice(&body).context("/debug/syncz: unexpected JSON")?;
    print(table(&s).as_bytes())
}

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs `deltapilot proxy-config`.
pub(crate) async fn config(args: ProxyConfigArgs) -> anyhow::Result<()> {
    let mut path = format!("/debug/config_dump?proxy={}", encode(&args.id));
    if let Some(t) = &args.types {
        path.push_str(&format!("&type={}", encode(t)));
    }
    let (code, body) = get(args.admin_addr, &path).await?;
    if code != 200 {
        bail!("{}", server_error(&body));
    }
    print(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_parse_with_length_chunks_or_eof() {
        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(parse_response(r).expect("ok"), (200, b"hello".to_vec()));
        let r = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(r).expect("ok"), (404, b"abcde".to_vec()));
        let r = b"HTTP/1.1 200 OK\r\n\r\nrest";
        assert_eq!(parse_response(r).expect("ok"), (200, b"rest".to_vec()));
        assert!(parse_response(b"garbage").is_err());
        assert_eq!(
            server_error(br#"{"error":"no such proxy"}"#),
            "no such proxy"
        );
        assert_eq!(
            encode("sidecar~1.2.3.4~a b"),
            "sidecar%7E1.2.3.4%7Ea%20b".replace("%7E", "~")
        );
    }
}
