# shellcheck shell=bash
# The secured listeners of scripts/kafka.sh (DELTAPILOT_KAFKA_TLS=1): sourced by
# it, not run. Adds to the broker
#   - an SSL listener that requires a client certificate (mutual TLS), and
#   - a SASL_SSL listener (no client certificate) with SCRAM-SHA-256,
#     SCRAM-SHA-512 and PLAIN for one user,
# with a CA, certificates and a password made fresh at every start (openssl CLI)
# in $STATE/tls. Apache Kafka reads them as PEM (`ssl.keystore.type=PEM`, Kafka
# 2.7+); the SCRAM credentials are written by the storage tool's `--add-scram`
# (KRaft), so no kafka-configs call is needed after the start.
#
# Files in $STATE/tls, for the tests (paths in $DELTAPILOT_RUN_DIR/kafka.env):
#   ca.pem                 the CA that signed the broker's and the client's certificates
#   other-ca.pem           a CA that signed nothing here (an untrusted CA for tests)
#   client.pem, client.key the client certificate and its key, encrypted with
#   client.key.password    this password (ssl.key.password)
#   sasl.username, sasl.password   the SASL user

TLS_SASL_USER=deltapilot

# tls_make_files DIR : the CA, the broker's and the client's certificates, and the
# passwords. The broker's certificate names 127.0.0.1 and localhost, so clients
# verify it with endpoint identification on (librdkafka's default). P-256 keys:
# generated in milliseconds, where RSA keys took seconds on a busy machine.
tls_make_files() {
    local d="$1"
    mkdir -p "$d"
    (
        cd "$d"
        umask 077
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=deltapilot test CA" \
            -keyout ca.key -out ca.pem 2>/dev/null
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=untrusted test CA" \
            -keyout other-ca.key -out other-ca.pem 2>/dev/null
        # The broker: key (PKCS#8, unencrypted) and certificate in one PEM keystore.
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=127.0.0.1" \
            -keyout broker.key -out broker.csr 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >broker.ext
        openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile broker.ext -out broker.pem 2>/dev/null
        openssl pkcs8 -topk8 -nocrypt -in broker.key -out broker.p8 2>/dev/null
        cat broker.p8 broker.pem >broker.keystore.pem
        # The client: its key encrypted with a password, as a secret file would hold it.
        python3 -c 'import secrets; print(secrets.token_hex(16))' >client.key.password
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=deltapilot-client" \
            -keyout client.plain.key -out client.csr 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile client.ext -out client.pem 2>/dev/null
        openssl pkcs8 -topk8 -v2 aes-256-cbc -in client.plain.key -out client.key \
            -passout file:client.key.password 2>/dev/null
        rm -f client.plain.key ./*.csr ./*.ext ./*.srl
        printf '%s\n' "$TLS_SASL_USER" >sasl.username
        python3 -c 'import secrets; print(secrets.token_hex(16))' >sasl.password
    ) || die "start: generating the test certificates with openssl failed (in $d)"
}

# tls_props DIR SSL_PORT SASL_PORT : server.properties lines for the two listeners
# (appended to the plaintext broker's).
tls_props() {
    local d="$1" sslport="$2" saslport="$3" pw
    pw="$(cat "$d/sasl.password")"
    cat <<EOF

# Secured listeners (DELTAPILOT_KAFKA_TLS=1): SSL with a required client
# certificate, and SASL_SSL with SCRAM and PLAIN. Their certificates are PEM.
ssl.keystore.type=PEM
ssl.keystore.location=$d/broker.keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$d/ca.pem
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$TLS_SASL_USER="$pw";
EOF
}

# tls_scram_args DIR : the storage tool's arguments that create the SCRAM user.
tls_scram_args() {
    local pw
    pw="$(cat "$1/sasl.password")"
    printf '%s\n' --add-scram "SCRAM-SHA-256=[name=$TLS_SASL_USER,password=$pw]" \
        --add-scram "SCRAM-SHA-512=[name=$TLS_SASL_USER,password=$pw]"
}

# tls_env_file DIR SSL_PORT SASL_PORT FILE : what tests need, as shell exports.
tls_env_file() {
    local d="$1" sslport="$2" saslport="$3" out="$4"
    cat >"$out" <<EOF
export DELTAPILOT_KAFKA_SSL_BROKERS=127.0.0.1:$sslport
export DELTAPILOT_KAFKA_SASL_BROKERS=127.0.0.1:$saslport
export DELTAPILOT_KAFKA_TLS_DIR=$d
EOF
}
