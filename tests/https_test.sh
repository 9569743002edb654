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
skip_all() {
    for c in $cases; do skip "$c" "$1"; done
    exit 77
}
# Only what this script sets may decide which CAs are trusted.
unset AWS_CA_BUNDLE CURL_CA_BUNDLE SSL_CERT_FILE SSL_CERT_DIR
# Not built is a broken build, not a missing service: fail.
[ -x "$DT" ] && [ -x "$TZ" ] && [ -x "$BENCH" ] || { fail https_setup "tools not built in $BUILD"; exit 1; }
command -v openssl >/dev/null || skip_all "openssl missing"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || skip_all "nginx missing"
"$NGINX" -V 2>&1 | grep -q -- --with-http_ssl_module || skip_all "nginx has no ssl module"

stop_nginx() {
    local pid
    pid=$(cat "$T/nginx/nginx.pid" 2>/dev/null) || return 0
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}
trap 'stop_nginx; rm -rf "$T"' EXIT

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
}
NGX
    "$NGINX" -p "$T/nginx" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" 2>>"$T/nginx/start.err"
}
started=0
for _ in 1 2 3 4 5; do
    PORT=$(free_port)
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
exit 0
