//! `--log` URIs: which backend, where, and with what options.
//!
//! - `file://DIR` — the embedded log in DIR. DIR may be absolute (`file:///var/lib/dp`)
//!   or relative (`file://./data/log`, the default).
//! - `kafka://HOST:PORT[,HOST:PORT…]/TOPIC` — a Kafka topic.
//!
//! Backend options ride in the query string so one flag carries a whole log
//! configuration: `file://./data?fsync=interval&fsync_interval_ms=5&segment_bytes=67108864`,
//! `file://./data?compact=true&retention=7d`, `file://./data?delete=true&retention=7d&retention_bytes=10737418240`,
//! `kafka://127.0.0.1:9092/events?partitions=6&append_timeout_ms=10000`.
//!
//! A `kafka://` query key with a dot is a librdkafka property (TLS, SASL, tuning),
//! and `config=FILE` names a file of more: see [`crate::kafka::settings`]
//! (`kafka://h:9093/events?security.protocol=SASL_SSL&sasl.mechanism=SCRAM-SHA-512&sasl.username=dp&sasl.password.file=/etc/dp/password`).
//! A secret in the URI is refused, and error messages show the URI redacted.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::file::{FileLogOptions, FsyncPolicy};
use super::kafka::KafkaOptions;
use crate::{Error, Result};

/// The default `--log` URI.
pub const DEFAULT_LOG_URI: &str = "file://./data/log";

/// A parsed `--log` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogUri {
    /// The embedded file log in `dir`.
    File {
        /// The log directory.
        dir: PathBuf,
    },
    /// A Kafka topic.
    Kafka {
        /// Comma-separated `host:port` bootstrap list.
        brokers: String,
        /// Topic name.
        topic: String,
    },
}

/// Options for both backends; only the chosen backend's part is used.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// Embedded-log options.
    pub file: FileLogOptions,
    /// Kafka options.
    pub kafka: KafkaOptions,
}

/// Parses a `--log` URI and its query options.
pub fn parse(uri: &str) -> Result<(LogUri, LogOptions)> {
    let bad = |reason: String| Error::InvalidUri {
        uri: crate::kafka::settings::redact_uri(uri),
        reason,
    };
    let (base, query) = match uri.split_once('?') {
        Some((b, q)) => (b, q),
        None => (uri, ""),
    };
    let mut opts = LogOptions::default();
    let params: Vec<(&str, &str)> = query
        .split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        .collect();

    if let Some(dir) = base.strip_prefix("file://") {
        if dir.is_empty() {
            return Err(bad(
                "file:// needs a directory, e.g. file://./data/log".into()
            ));
        }
        for (k, v) in params {
            match k {
                "fsync" => {
                    opts.file.fsync = match v {
                        "always" => FsyncPolicy::Always,
                        "never" => FsyncPolicy::Never,
                        "interval" => FsyncPolicy::Interval(opts.file.fsync.interval_or_default()),
                        _ => {
                            return Err(bad(format!(
                                "fsync={v}: expected always, interval or never"
                            )));
                        }
                    }
                }
                "fsync_interval_ms" => {
                    let ms = parse_num::<u64>(k, v).map_err(bad)?;
                    opts.file.fsync = FsyncPolicy::Interval(Duration::from_millis(ms.max(1)));
                }
                "segment_bytes" => {
                    let n = parse_num::<u64>(k, v).map_err(bad)?;
                    if n < 4096 {
                        return Err(bad("segment_bytes must be at least 4096".into()));
                    }
                    opts.file.segment_bytes = n;
                }
                "compact" => {
                    opts.file.retention.compact = match v {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad(format!("compact={v:?}: expected true or false"))),
                    }
                }
                "delete" => {
                    opts.file.retention.delete = match v {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad(format!("delete={v:?}: expected true or false"))),
                    }
                }
                "retention_bytes" => {
                    let n = parse_num::<u64>(k, v).map_err(bad)?;
                    if n == 0 {
                        return Err(bad(
                            "retention_bytes must be above 0 (leave it out for no size window)"
                                .into(),
                        ));
                    }
                    opts.file.retention.retention_bytes = Some(n);
                }
                "retention" => {
                    opts.file.retention.tombstone_retention =
                        parse_retention(v).map_err(|why| bad(format!("retention={v:?}: {why}")))?;
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option {k:?} for file:// (known: fsync, fsync_interval_ms, \
                         segment_bytes, compact, delete, retention, retention_bytes)"
                    )));
                }
            }
        }
        return Ok((
            LogUri::File {
                dir: PathBuf::from(dir),
            },
            opts,
        ));
    }

    if let Some(rest) = base.strip_prefix("kafka://") {
        let (brokers, topic) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected kafka://HOST:PORT/TOPIC".into()))?;
        if brokers.contains('@') {
            return Err(bad(
                "credentials in the URI (user:password@) are refused: a URI shows in process \
                 listings, shell history and logs; give sasl.username=USER and \
                 sasl.password.file=PATH (or sasl.password.env=VAR)"
                    .into(),
            ));
        }
        if brokers.is_empty() || brokers.split(',').any(|b| !b.contains(':')) {
            return Err(bad("every broker must be HOST:PORT".into()));
        }
        if topic.is_empty()
            || topic.len() > 249
            || !topic
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(bad(
                "topic must be 1-249 characters of [A-Za-z0-9._-]".into()
            ));
        }
        for (k, v) in params {
            match k {
                "partitions" => {
                    let n = parse_num::<i32>(k, v).map_err(bad)?;
                    if !(1..=1024).contains(&n) {
                        return Err(bad("partitions must be 1..=1024".into()));
                    }
                    opts.kafka.partitions = n;
                }
                "append_timeout_ms" => {
                    opts.kafka.append_timeout = Duration::from_millis(parse_num(k, v).map_err(bad)?)
                }
                "request_timeout_ms" => {
                    opts.kafka.request_timeout =
                        Duration::from_millis(parse_num(k, v).map_err(bad)?)
                }
                "config" => opts.kafka.client.set_file(v).map_err(bad)?,
                k if crate::kafka::settings::is_librdkafka_key(k) => {
                    opts.kafka.client.add_uri(k, v).map_err(bad)?
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option {k:?} for kafka:// (known: partitions, append_timeout_ms, \
                         request_timeout_ms, config=FILE, and librdkafka properties, which have \
                         a dot: security.protocol, ssl.ca.location, sasl.mechanism, …)"
                    )));
                }
            }
        }
        return Ok((
            LogUri::Kafka {
                brokers: brokers.to_owned(),
                topic: topic.to_owned(),
            },
            opts,
        ));
    }

    Err(bad("expected file://DIR or kafka://HOST:PORT/TOPIC".into()))
}

/// A retention window: a whole number with a unit, `s`, `m`, `h` or `d`
/// (`90s`, `30m`, `12h`, `7d`).
fn parse_retention(v: &str) -> std::result::Result<Duration, String> {
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| "expected a whole number with a unit, e.g. 7d, 12h, 30m, 90s".to_owned())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "" => return Err("a unit is required: s, m, h or d (e.g. 7d)".into()),
        _ => return Err(format!("unknown unit {unit:?}; use s, m, h or d")),
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| "too long".to_owned())
}

fn parse_num<T: FromStr>(key: &str, value: &str) -> std::result::Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{key}={value:?} is not a valid number"))
}

impl FromStr for LogUri {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        parse(s).map(|(u, _)| u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uri_with_options() {
        let (u, o) = parse("file://./data/log?fsync=always&segment_bytes=65536").expect("parse");
        assert_eq!(
            u,
            LogUri::File {
                dir: "./data/log".into()
            }
        );
        assert_eq!(o.file.fsync, FsyncPolicy::Always);
        assert_eq!(o.file.segment_bytes, 65536);
        assert!(!o.file.retention.compact);

        let (_, o) = parse("file://./d?compact=true&retention=12h").expect("parse");
        assert!(o.file.retention.compact);
        assert!(!o.file.retention.delete);
        assert_eq!(
            o.file.retention.tombstone_retention,
            Duration::from_secs(12 * 3600)
        );

        let (_, o) =
            parse("file://./d?delete=true&retention=7d&retention_bytes=1048576").expect("parse");
        assert!(o.file.retention.delete && !o.file.retention.compact);
        assert_eq!(
            o.file.retention.tombstone_retention,
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(o.file.retention.retention_bytes, Some(1_048_576));
    }

    #[test]
    fn kafka_uri() {
        let (u, o) = parse("kafka://127.0.0.1:9092/events?partitions=3").expect("parse");
        assert_eq!(
            u,
            LogUri::Kafka {
                brokers: "127.0.0.1:9092".into(),
                topic: "events".into()
            }
        );
        assert_eq!(o.kafka.partitions, 3);
    }

    #[test]
    fn kafka_uri_with_security_settings() {
        let (_, o) = parse(
            "kafka://h:9093/events?security.protocol=SASL_SSL&ssl.ca.location=/ca.pem\
             &sasl.mechanism=SCRAM-SHA-512&sasl.username=dp&sasl.password.file=/pw\
             &config=/etc/dp/kafka.properties",
        )
        .expect("parse");
        assert!(!o.kafka.client.is_empty());
        assert_eq!(
            o.kafka.client.config_file(),
            Some(std::path::Path::new("/etc/dp/kafka.properties"))
        );
    }

    #[test]
    fn a_password_in_the_uri_is_refused_and_not_echoed() {
        for (uri, needle) in [
            (
                "kafka://h:1/t?sasl.username=u&sasl.password=hunter2",
                "sasl.password in the URI is refused",
            ),
            ("kafka://u:hunter2@h:1/t", "credentials in the URI"),
        ] {
            let e = parse(uri).expect_err(uri).to_string();
            assert!(e.contains(needle), "{uri}: {e}");
            assert!(!e.contains("hunter2"), "{uri}: {e}");
        }
    }

    #[test]
    fn bad_uris_say_why() {
        for (uri, needle) in [
            ("http://x", "expected file://"),
            ("kafka://nohost/t", "HOST:PORT"),
            ("kafka://h:1/bad topic", "topic"),
            ("file://./d?fsync=sometimes", "fsync"),
            ("file://./d?colour=blue", "unknown option"),
            ("file://./d?compact=yes", "compact"),
            (
                "file://./d?delete=1",
                "delete=\"1\": expected true or false",
            ),
            ("file://./d?retention_bytes=10GB", "not a valid number"),
            ("file://./d?retention_bytes=0", "above 0"),
            ("file://./d?retention=7", "unit is required"),
            ("file://./d?retention=7w", "unknown unit"),
            ("file://./d?retention=d", "whole number"),
            ("kafka://h:1/t?ssl.ca.locaton=/x", "ssl.ca.locaton"),
            ("kafka://h:1/t?colour=blue", "unknown option"),
            ("kafka://h:1/t?acks=0", "set by deltapilot"),
        ] {
            let e = parse(uri).expect_err(uri).to_string();
            assert!(e.contains(needle), "{uri}: {e}");
        }
    }
}
