#!/usr/bin/env bash
# HTTPS end to end: a throwaway CA and a server certificate for 127.0.0.1
# (IP SAN only), nginx serving a checkpoint over TLS on a free loopback
# port. The tools must refuse the unknown CA by default with a certificate
# error, trust it with --ca-bundle or AWS_CA_BUNDLE, still check the host
# name, and load exactly the file's bytes. Prints PASS/FAIL/SKIP lines;
# exit 77 (every case SKIP) only when openssl or nginx cannot run here.
set -u
cd "$(dirname "$0")/.." || exit 2
. tests/util/lib.sh
BENCH=$BUILD/tzr-bench
cases="https_refuses_unknown_ca https_ca_bundle_flag https_ca_bundle_env https_checks_host_name
https_list_sha256_equal_local https_export_equal_file https_tensorize_input_equal_file"
s3_cases="s3_tls_upload_same s3_tls_parts_unsigned_payload s3_tls_signed_requests_accepted"
skip_all() {
    for c in $cases $s3_cases; do skip "$c" "$1"; done
    exit 77
}
# S3 over TLS: nginx terminates TLS in front of Swift's s3api (started
# below when Swift is installed; its cases are skipped otherwise). Part
# uploads go UNSIGNED-PAYLOAD there (TLS covers the bytes, as botocore
# does): the proxy's log shows what each request declared.
# Only what this script sets may decide which CAs are trusted.
unset AWS_CA_BUNDLE CURL_CA_BUNDLE SSL_CERT_FILE SSL_CERT_DIR
# Not built is a broken build, not a missing service: fail.
[ -x "$DT" ] && [ -x "$TZ" ] && [ -x "$BENCH" ] || { fail https_setup "tools not built in $BUILD"; exit 1; }
command -v openssl >/dev/null || skip_all "openssl missing"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || skip_all "nginx missing"
"$NGINX" -V 2>&1 | grep -q -- --with-http_ssl_module || skip_all "nginx has no ssl module"

stop_all() {
    stop_nginx
    [ -d "$T/swift" ] && timeout 30 bash tests/util/swift.sh stop "$T/swift" >/dev/null 2>&1
}
stop_nginx() {
    local pid
    pid=$(cat "$T/nginx/nginx.pid" 2>/dev/null) || return 0
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}
trap 'stop_all; rm -rf "$T"' EXIT

# ---- certificates: CA, and a server certificate it signs for IP 127.0.0.1
mkcerts() {
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout "$T/ca.key" -out "$T/ca.pem" -days 2 \
        -subj "/CN=libtzr test CA" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" &&
        openssl req "${ec[@]}" -keyout "$T/srv.key" -out "$T/srv.csr" -subj "/CN=127.0.0.1" &&
        printf '%s\n' "subjectAltName=IP:127.0.0.1" "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$T/srv.ext" &&
        openssl x509 -req -in "$T/srv.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -CAcreateserial \
            -days 2 -extfile "$T/srv.ext" -out "$T/srv.pem"
}
mkcerts >"$T/openssl.log" 2>&1 ||
    skip_all "openssl could not make certificates: $(tail -2 "$T/openssl.log" | tr '\n' ' ')"

# ---- the checkpoint: LLM-shaped, 16 MiB (several ranges, small tensors packed)
mkdir -p "$T/www" "$T/nginx"
"$BENCH" --make-sample "$T/m.safetensors" --size-mib 16 --layers 8 >/dev/null &&
    $TZ -q "$T/m.safetensors" -o "$T/www/m.tensors" || {
    for c in $cases; do fail "$c" "could not build the test checkpoint"; done
    exit 1
}
# nginx workers run unprivileged: the served tree must be world-readable
# (the key and certificate are read by the master only).
chmod 755 "$T" "$T/www" && chmod 644 "$T/www/m.tensors"

# ---- Swift s3api on loopback, behind the TLS proxy ----------------------
swift_http=
if [ -x "$BUILD/tests/test_s3_http" ]; then
    swift_http=$(timeout 120 bash tests/util/swift.sh start "$T/swift" 2>"$T/swift.err")
    [ -n "$swift_http" ] && timeout 60 "$BUILD/tests/test_s3_http" --mkbucket "$swift_http" tzr >/dev/null 2>&1 ||
        swift_http=
fi

# ---- nginx with TLS on a free port (retried if another process takes it)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }
start_nginx() {
    cat >"$T/nginx/nginx.conf" <<NGX
worker_processes 1;
pid $T/nginx/nginx.pid;
error_log $T/nginx/error.log;
events { worker_connections 64; }
http {
    access_log off;
    keepalive_requests 10000;
    server {
        listen 127.0.0.1:$PORT ssl;
        ssl_certificate $T/srv.pem;
        ssl_certificate_key $T/srv.key;
        root $T/www;
    }
    log_format s3 '\$request_method \$request_uri \$http_x_amz_content_sha256';
    server {
        listen 127.0.0.1:$SPORT ssl;
        ssl_certificate $T/srv.pem;
        ssl_certificate_key $T/srv.key;
        access_log $T/nginx/s3.log s3;
        client_max_body_size 0;
        proxy_request_buffering off;
        location / {
            proxy_pass ${swift_http:-http://127.0.0.1:9};
            proxy_set_header Host \$http_host;
            proxy_http_version 1.1;
        }
    }
}
NGX
    "$NGINX" -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" 2>>"$T/nginx/start.err"
}
started=0
for _ in 1 2 3 4 5; do
    PORT=$(free_port) SPORT=$(free_port)
    if start_nginx; then started=1; break; fi
done
[ "$started" = 1 ] || skip_all "nginx did not start: $(tail -2 "$T/nginx/start.err" | tr '\n' ' ')"
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
URL=https://127.0.0.1:$PORT/m.tensors
LOCAL=$T/www/m.tensors

# (a) unknown CA: refused, one line naming the URL and the certificate problem
$DT "$URL" --verify >"$T/a.out" 2>"$T/a.err"
rc=$?
if [ "$rc" = 1 ] && grep -qiE "certificate (problem|verif)" "$T/a.err" && grep -qF "$URL" "$T/a.err" &&
    [ "$(wc -l <"$T/a.err")" = 1 ]; then
    pass https_refuses_unknown_ca
else
    fail https_refuses_unknown_ca "exit $rc: $(head -c 300 "$T/a.err" | tr '\n' ' ')"
fi
echo "  message: $(cat "$T/a.err")" >&2

# (b) the CA given: by flag, by environment
check https_ca_bundle_flag $DT "$URL" --verify --ca-bundle "$T/ca.pem"
check https_ca_bundle_env env AWS_CA_BUNDLE="$T/ca.pem" $DT "$URL" --verify
# a trusted CA does not excuse a wrong name: the certificate is for 127.0.0.1 only
if $DT "https://localhost:$PORT/m.tensors" --verify --ca-bundle "$T/ca.pem" >/dev/null 2>"$T/h.err"; then
    fail https_checks_host_name "a certificate for 127.0.0.1 was accepted for localhost"
else
    check https_checks_host_name grep -qiE "subject name|host ?name" "$T/h.err"
    echo "  message: $(cat "$T/h.err")" >&2
fi

# (c) the loaded bytes are the file's
$DT "$LOCAL" --list --json --sha256 >"$T/local.json" 2>&1
$DT "$URL" --list --json --sha256 --ca-bundle "$T/ca.pem" >"$T/https.json" 2>&1
check https_list_sha256_equal_local cmp "$T/local.json" "$T/https.json"
$DT "$URL" -q -o "$T/copy.tensors" --ca-bundle "$T/ca.pem" >"$T/o.err" 2>&1
check https_export_equal_file cmp "$LOCAL" "$T/copy.tensors"
$TZ -q "$URL" -o "$T/re.tensors" --ca-bundle "$T/ca.pem" >"$T/t.err" 2>&1
check https_tensorize_input_equal_file cmp "$LOCAL" "$T/re.tensors"

# ---- S3 over TLS ---------------------------------------------------------
if [ -z "$swift_http" ]; then
    for c in $s3_cases; do skip "$c" "Swift did not start: $(tr '\n' ' ' <"$T/swift.err" 2>/dev/null | cut -c1-150)"; done
    exit 0
fi
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3 AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE
export AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing AWS_DEFAULT_REGION=us-east-1 \
    AWS_ENDPOINT_URL=https://127.0.0.1:$SPORT AWS_CA_BUNDLE=$T/ca.pem
# ~9 MiB in 5 MiB parts: two UploadPart requests (the index part last).
timeout 120 $TZ -q "$T/m.safetensors" -o s3://tzr/tls.tensors --part-size 5 --uploads 4 2>"$T/up.err" &&
    timeout 120 $DT s3://tzr/tls.tensors -q -o "$T/tls-back.tensors" 2>>"$T/up.err"
check s3_tls_upload_same cmp "$LOCAL" "$T/tls-back.tensors"
parts=$(grep -c '^PUT .*partNumber=' "$T/nginx/s3.log")
signed=$(grep '^PUT .*partNumber=' "$T/nginx/s3.log" | grep -vc ' UNSIGNED-PAYLOAD$')
check s3_tls_parts_unsigned_payload sh -c "test $parts -ge 2 && test $signed = 0"
# The rest stay signed over their bodies (CompleteMultipartUpload's XML)
# or the empty body (GET, HEAD), and Swift accepted them all.
posts=$(grep -c '^POST .*uploadId=.* [0-9a-f]\{64\}$' "$T/nginx/s3.log")
check s3_tls_signed_requests_accepted sh -c "test $posts = 1 && ! grep -q 'SignatureDoesNotMatch' '$T/up.err'"
exit 0
