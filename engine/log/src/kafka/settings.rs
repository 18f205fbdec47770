//! librdkafka settings an operator gives: security (TLS, SASL) and tuning.
//!
//! They come from the `kafka://` URI's query (every key with a dot is a librdkafka
//! property, e.g. `security.protocol=SASL_SSL`) and from an optional `config=FILE`
//! of librdkafka-style `key=value` lines; a key in both takes the URI's value.
//!
//! - **Secrets never ride in the URI.** A URI shows in process listings, shell
//!   history, manifests and logs, so a secret property there (see [`is_secret`]) is
//!   refused. Give it as `KEY.file=PATH` (the file's contents, one trailing newline
//!   dropped) or `KEY.env=VAR` (an environment variable), or literally in the
//!   config file (which is then a secret itself).
//! - **deltapilot's own settings are not overridable.** The properties the log's
//!   correctness rests on (idempotence, `acks`, the partitioner, assignment-only
//!   readers, ...) are refused with the reason ([`OWNED`]); the tuning defaults it
//!   sets (`linger.ms`, `compression.type`, `fetch.wait.max.ms`, ...) yield to the
//!   operator's value.
//! - **A typo is an error.** Every property is checked by librdkafka itself, one
//!   at a time, and its complaint is reported with the key's name (and the value
//!   redacted if secret).
//! - **Redacted everywhere.** [`Resolved::describe`], `Debug` and every error show
//!   a secret's source (file or variable), never its value.
//!
//! What it does NOT do: Kerberos (`sasl.mechanism=GSSAPI` needs Cyrus SASL, which
//! this build does not link), or reload a secret file while running (librdkafka
//! reads its configuration once per client).

use std::fmt;
use std::path::{Path, PathBuf};

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaConfRes;

/// Properties whose values are secrets: refused in the URI, redacted in logs, and
/// the ones that take `.file` / `.env`. Any other key ending in `.password`,
/// `.secret` or `.passphrase` is treated as secret too (see [`is_secret`]).
pub const SECRET_KEYS: &[&str] = &[
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.key.pem",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
];

/// What a redacted value shows instead.
pub const REDACTED: &str = "[redacted]";

/// Whether `key`'s value is a secret.
pub fn is_secret(key: &str) -> bool {
    SECRET_KEYS.contains(&key)
        || [".password", ".secret", ".passphrase"]
            .iter()
            .any(|s| key.ends_with(s))
}

/// `sasl.oauthbearer.*` properties that are not secret (everything else under it
/// is redacted in logs: extensions and assertion claims may carry credentials).
const OAUTHBEARER_PUBLIC: &[&str] = &[
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.grant.type",
];

/// Whether `key`'s value is hidden wherever it is shown: every secret
/// ([`is_secret`]), and every `sasl.oauthbearer.*` value but a few public ones.
pub fn is_redacted(key: &str) -> bool {
    is_secret(key) || (key.starts_with("sasl.oauthbearer.") && !OAUTHBEARER_PUBLIC.contains(&key))
}

/// Properties deltapilot sets itself and an operator may not change, each with why.
pub const OWNED: &[(&str, &str)] = &[
    ("bootstrap.servers", BROKERS),
    ("metadata.broker.list", BROKERS),
    ("enable.idempotence", DURABLE),
    ("acks", DURABLE),
    ("request.required.acks", DURABLE),
    ("max.in.flight.requests.per.connection", DURABLE),
    ("max.in.flight", DURABLE),
    (
        "partitioner",
        "every writer must put a key on the same partition (murmur2, as the Java client)",
    ),
    ("message.timeout.ms", "use the URI option append_timeout_ms"),
    (
        "delivery.timeout.ms",
        "use the URI option append_timeout_ms",
    ),
    (
        "request.timeout.ms",
        "use the URI option request_timeout_ms",
    ),
    ("group.id", READERS),
    ("group.instance.id", READERS),
    ("enable.auto.commit", READERS),
    ("enable.auto.offset.store", READERS),
    (
        "auto.offset.reset",
        "a position the broker no longer has must be an error, not a silent jump",
    ),
    (
        "enable.partition.eof",
        "readers find the end of a partition by it",
    ),
    (
        "allow.auto.create.topics",
        "deltapilot creates its topic itself, compacted, with its partition count",
    ),
    ("transactional.id", "the log does not use transactions"),
];

const BROKERS: &str = "the brokers come from the URI (kafka://HOST:PORT,…/TOPIC)";
const DURABLE: &str =
    "acknowledged appends must be durable and per-key order kept (idempotent, acks=all)";
const READERS: &str =
    "replicas read every partition by assignment and keep their own positions; no group";

/// Where a secret's value comes from.
#[derive(Clone, PartialEq, Eq)]
enum Source {
    /// Given literally (only allowed in the config file for secrets).
    Value(String),
    /// `KEY.file=PATH`.
    File(PathBuf),
    /// `KEY.env=VAR`.
    Env(String),
}

/// The librdkafka settings of a `kafka://` URI as given (files and variables not
/// read yet: that happens at connect, see [`ClientSettings::resolve`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientSettings {
    /// `config=FILE`.
    file: Option<PathBuf>,
    /// The URI's librdkafka properties, in order.
    uri: Vec<(String, Source)>,
}

impl fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let uri: Vec<String> = self
            .uri
            .iter()
            .map(|(k, s)| format!("{k}={}", shown(k, s)))
            .collect();
        f.debug_struct("ClientSettings")
            .field("file", &self.file)
            .field("uri", &uri)
            .finish()
    }
}

/// A value as it may be shown: secrets by their source only.
fn shown(key: &str, s: &Source) -> String {
    match s {
        Source::Value(_) if is_redacted(key) => REDACTED.to_owned(),
        Source::Value(v) => v.clone(),
        Source::File(p) => format!("{REDACTED} (file {})", p.display()),
        Source::Env(v) => format!("{REDACTED} (env {v})"),
    }
}

impl ClientSettings {
    /// Whether nothing was given.
    pub fn is_empty(&self) -> bool {
        self.file.is_none() && self.uri.is_empty()
    }

    /// The `config=FILE` given, if any.
    pub fn config_file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Sets the `config=FILE` of `key=value` lines.
    pub(crate) fn set_file(&mut self, path: &str) -> Result<(), String> {
        if path.is_empty() {
            return Err("config= needs a file path".into());
        }
        if self.file.is_some() {
            return Err("config= is given twice".into());
        }
        self.file = Some(PathBuf::from(path));
        Ok(())
    }

    /// Adds one librdkafka property from the URI's query.
    pub(crate) fn add_uri(&mut self, key: &str, value: &str) -> Result<(), String> {
        let (key, source) = entry(key, value, false)?;
        if self.uri.iter().any(|(k, _)| *k == key) {
            return Err(format!("{key} is given twice"));
        }
        if let Source::Value(v) = &source {
            check_with_librdkafka(&key, v)?;
        }
        self.uri.push((key, source));
        Ok(())
    }

    /// Reads the config file, the secret files and variables, and has librdkafka
    /// check every property: the settings every client of the log gets.
    pub fn resolve(&self) -> Result<Resolved, String> {
        let mut out: Vec<Entry> = Vec::new();
        if let Some(path) = &self.file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("config={}: cannot read: {e}", path.display()))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let at = || format!("config={} line {}", path.display(), i + 1);
                let (k, v) = line
                    .split_once('=')
                    .ok_or_else(|| format!("{}: expected key=value (librdkafka property)", at()))?;
                let (key, source) =
                    entry(k.trim(), v.trim(), true).map_err(|why| format!("{}: {why}", at()))?;
                if out.iter().any(|e| e.key == key) {
                    return Err(format!("{}: {key} is given twice in the file", at()));
                }
                let e = Entry::read(key, source).map_err(|why| format!("{}: {why}", at()))?;
                check_with_librdkafka(&e.key, &e.value)
                    .map_err(|why| format!("{}: {why}", at()))?;
                out.push(e);
            }
        }
        for (key, source) in &self.uri {
            let e = Entry::read(key.clone(), source.clone())?;
            check_with_librdkafka(&e.key, &e.value)?;
            match out.iter_mut().find(|o| o.key == *key) {
                Some(o) => *o = e,
                None => out.push(e),
            }
        }
        if let Some(m) = out
            .iter()
            .find(|e| e.key == "sasl.mechanism" || e.key == "sasl.mechanisms")
            && m.value.eq_ignore_ascii_case("GSSAPI")
        {
            return Err(format!(
                "{}=GSSAPI (Kerberos) is not supported: this build's librdkafka has no Cyrus \
                 SASL; use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN",
                m.key
            ));
        }
        Ok(Resolved { entries: out })
    }
}

/// Splits `KEY.file` / `KEY.env` off a secret key and applies the rules on where
/// a property may come from.
fn entry(key: &str, value: &str, in_file: bool) -> Result<(String, Source), String> {
    if key.is_empty() {
        return Err("an empty key".into());
    }
    for (stem, indirect) in [
        (key.strip_suffix(".file"), true),
        (key.strip_suffix(".env"), false),
    ] {
        if let Some(stem) = stem
            && is_secret(stem)
        {
            if value.is_empty() {
                return Err(format!("{key} needs a value"));
            }
            let source = if indirect {
                Source::File(PathBuf::from(value))
            } else {
                Source::Env(value.to_owned())
            };
            return Ok((stem.to_owned(), source));
        }
    }
    if let Some((_, why)) = OWNED.iter().find(|(k, _)| *k == key) {
        return Err(format!(
            "{key} is set by deltapilot and cannot be changed: {why}"
        ));
    }
    if is_secret(key) && !in_file {
        return Err(format!(
            "{key} in the URI is refused: a URI shows in process listings, shell history, \
             manifests and logs; give {key}.file=PATH (a file holding it) or {key}.env=VAR \
             (an environment variable), or put it in the config=FILE"
        ));
    }
    Ok((key.to_owned(), Source::Value(value.to_owned())))
}

/// Whether `key` names a librdkafka property (the URI routes such keys here, also
/// the few without a dot: `debug`, `acks`, `partitioner`).
pub(crate) fn is_librdkafka_key(key: &str) -> bool {
    if key.contains('.') || OWNED.iter().any(|(k, _)| *k == key) {
        return true;
    }
    let mut c = ClientConfig::new();
    c.set(key, "");
    !matches!(
        c.create_native_config(),
        Err(KafkaError::ClientConfig(
            RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN,
            ..
        ))
    )
}

/// Has librdkafka check one property by itself (name known, value acceptable);
/// nothing is contacted and no file is opened.
fn check_with_librdkafka(key: &str, value: &str) -> Result<(), String> {
    let mut c = ClientConfig::new();
    c.set(key, value);
    match c.create_native_config() {
        Ok(_) => Ok(()),
        Err(KafkaError::ClientConfig(_, desc, _, _)) => {
            let v = if is_redacted(key) { REDACTED } else { value };
            Err(format!("librdkafka refused {key}={v}: {desc}"))
        }
        Err(e) => Err(format!("librdkafka refused {key}: {e}")),
    }
}

/// A client-creation error in words, a secret value redacted (rdkafka's own
/// `Display` of a configuration error prints the value). librdkafka checks the
/// files it is given here: an unreadable `ssl.ca.location` fails this way.
pub(crate) fn client_error(e: KafkaError) -> String {
    match e {
        KafkaError::ClientConfig(_, desc, key, value) => {
            let v = if is_redacted(&key) { REDACTED } else { &value };
            format!("librdkafka refused {key}={v}: {desc}")
        }
        KafkaError::ClientCreation(why) => format!("librdkafka refused the configuration: {why}"),
        other => other.to_string(),
    }
}

/// One property with its value read.
#[derive(Clone)]
struct Entry {
    key: String,
    value: String,
    /// Where it came from, for the log line (`None`: given literally).
    from: Option<String>,
}

impl Entry {
    fn read(key: String, source: Source) -> Result<Self, String> {
        let (value, from) = match source {
            Source::Value(v) => (v, None),
            Source::File(p) => {
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| format!("{key}.file={}: cannot read: {e}", p.display()))?;
                let v = text
                    .strip_suffix('\n')
                    .map(|t| t.strip_suffix('\r').unwrap_or(t))
                    .unwrap_or(&text)
                    .to_owned();
                if v.is_empty() {
                    return Err(format!("{key}.file={}: the file is empty", p.display()));
                }
                (v, Some(format!("file {}", p.display())))
            }
            Source::Env(var) => match std::env::var(&var) {
                Ok(v) if !v.is_empty() => (v, Some(format!("env {var}"))),
                Ok(_) => return Err(format!("{key}.env={var}: the variable is empty")),
                Err(_) => return Err(format!("{key}.env={var}: the variable is not set")),
            },
        };
        Ok(Self { key, value, from })
    }
}

/// The operator's settings with every file and variable read: applied last to
/// every client (producer, consumers, admin).
#[derive(Clone, Default)]
pub struct Resolved {
    entries: Vec<Entry>,
}

impl Resolved {
    /// Writes the settings over `c` (after deltapilot's own defaults).
    ///
    /// Without `ssl.ca.location` or `ssl.ca.pem`, TLS trusts the system's CA
    /// bundle (`ssl.ca.location=probe`: librdkafka looks in the usual places):
    /// the OpenSSL built into this binary would otherwise look in its own
    /// compile-time directory, which holds nothing.
    pub(crate) fn apply(&self, c: &mut ClientConfig) {
        if self.get("ssl.ca.location").is_none() && self.get("ssl.ca.pem").is_none() {
            c.set("ssl.ca.location", "probe");
        }
        for e in &self.entries {
            c.set(&e.key, &e.value);
        }
    }

    /// The value given for `key`, if any.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.value.as_str())
    }

    /// `key=value …` with secrets redacted and their sources named; `(none)` when
    /// nothing was given.
    pub fn describe(&self) -> String {
        if self.entries.is_empty() {
            return "(none)".into();
        }
        let parts: Vec<String> = self
            .entries
            .iter()
            .map(|e| match (&e.from, is_redacted(&e.key)) {
                (Some(from), true) => format!("{}={REDACTED} ({from})", e.key),
                (None, true) => format!("{}={REDACTED}", e.key),
                (_, false) => format!("{}={}", e.key, e.value),
            })
            .collect();
        parts.join(" ")
    }
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Every property of a client configuration, sorted, secrets redacted: the
/// effective configuration logged at connect.
pub(crate) fn describe_config(c: &ClientConfig) -> String {
    let mut parts: Vec<String> = c
        .config_map()
        .into_iter()
        .map(|(k, v)| {
            if is_redacted(k) {
                format!("{k}={REDACTED}")
            } else {
                format!("{k}={v}")
            }
        })
        .collect();
    parts.sort();
    parts.join(" ")
}

/// A log URI fit for a message: secret values and any `user:password@` of a
/// `kafka://` URI replaced by [`REDACTED`]; anything else as is.
pub fn redact_uri(uri: &str) -> String {
    let (base, query) = match uri.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (uri, None),
    };
    let base = match base.strip_prefix("kafka://") {
        Some(rest) => {
            let (authority, topic) = rest.split_once('/').unwrap_or((rest, ""));
            match authority.rsplit_once('@') {
                Some((_, hosts)) => format!("kafka://{REDACTED}@{hosts}/{topic}"),
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    match query {
        None => base,
        Some(q) => {
            let parts: Vec<String> = q
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if is_redacted(k) => format!("{k}={REDACTED}"),
                    _ => kv.to_owned(),
                })
                .collect();
            format!("{base}?{}", parts.join("&"))
        }
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
