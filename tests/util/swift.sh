#!/usr/bin/env bash
# Self-contained OpenStack Swift + s3api on 127.0.0.1 for tests.
#   swift.sh start DIR   builds rings and configs under DIR, starts proxy,
#                        account, container and object servers, waits until
#                        the proxy answers; prints the S3 endpoint URL on
#                        stdout (create buckets with a signed S3 PUT). Exit 1 (reason on
#                        stderr) when it cannot.
#   swift.sh stop DIR    stops the servers started for DIR (by pid) and
#                        removes DIR.
# User test:tester / testing (.admin), tempauth; S3 key = "test:tester",
# secret = "testing". A second account for per-call settings tests:
# test2:tester2 / testing2. Nothing but 127.0.0.1 is used.
set -u
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
    if [ -f "$dir/pids" ]; then
        while read -r pid; do
            kill "$pid" 2>/dev/null
        done <"$dir/pids"
        sleep 0.5
        while read -r pid; do
            kill -9 "$pid" 2>/dev/null
        done <"$dir/pids"
    fi
    rm -rf "$dir"
}

start() {
    for b in swift-ring-builder swift-proxy-server swift-account-server swift-container-server \
        swift-object-server; do
        command -v "$b" >/dev/null || { echo "swift: $b not installed" >&2; return 1; }
    done
    mkdir -p "$dir/etc" "$dir/srv/d1" "$dir/run" "$dir/log" || return 1
    # Swift keeps metadata in xattrs.
    if ! /usr/bin/python3 -c "import os,sys; os.setxattr(sys.argv[1],'user.tzr',b'1')" "$dir/srv/d1" 2>/dev/null; then
        echo "swift: filesystem of $dir has no user xattrs" >&2; return 1
    fi
    local pp ap cp op
    pp=$(free_port); ap=$(free_port); cp=$(free_port); op=$(free_port)
    cat >"$dir/etc/swift.conf" <<EOF
[swift-hash]
swift_hash_path_suffix = tzrtest
swift_hash_path_prefix = tzrtest
[storage-policy:0]
name = Policy-0
default = yes
EOF
    local common="[DEFAULT]
bind_ip = 127.0.0.1
workers = 0
swift_dir = $dir/etc
devices = $dir/srv
mount_check = false
log_name = swift
log_level = WARNING
log_address = $dir/log/nolog
"
    for kind in account container object; do
        local port
        case $kind in account) port=$ap;; container) port=$cp;; object) port=$op;; esac
        printf '%sbind_port = %s\n[pipeline:main]\npipeline = %s-server\n[app:%s-server]\nuse = egg:swift#%s\n' \
            "$common" "$port" "$kind" "$kind" "$kind" >"$dir/etc/$kind-server.conf"
        [ "$kind" = object ] && printf '[object-replicator]\n[object-updater]\n[object-auditor]\n' >>"$dir/etc/$kind-server.conf"
        (cd "$dir/etc" && swift-ring-builder $kind.builder create 4 1 1 >/dev/null &&
            swift-ring-builder $kind.builder add r1z1-127.0.0.1:$port/d1 100 >/dev/null &&
            swift-ring-builder $kind.builder rebalance >/dev/null) || { echo "swift: ring $kind failed" >&2; return 1; }
    done
    cat >"$dir/etc/proxy-server.conf" <<EOF
$common
bind_port = $pp
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:1
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
allowable_clock_skew = 900
[filter:tempauth]
use = egg:swift#tempauth
user_admin_admin = admin .admin .reseller_admin
user_test_tester = testing .admin
user_test2_tester2 = testing2 .admin
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
EOF
    : >"$dir/pids"
    for kind in account container object proxy; do
        swift-$kind-server "$dir/etc/$kind-server.conf" >"$dir/log/$kind.log" 2>&1 &
        echo $! >>"$dir/pids"
    done
    local url="http://127.0.0.1:$pp"
    local i ok=0
    for i in $(seq 1 ${TZR_SWIFT_WAIT:-100}); do
        ok=1
        for port in $pp $ap $cp $op; do
            c=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$port/healthcheck" 2>/dev/null)
            [ "$c" = 000 ] && { ok=0; break; }
        done
        [ $ok = 1 ] && break
        sleep 0.2
    done
    if [ $ok = 0 ]; then
        echo "swift: servers did not come up; proxy log:" >&2
        tail -n 5 "$dir/log/proxy.log" >&2
        return 1
    fi
    echo "$url"
}

case $cmd in
start) start || { [ -n "${TZR_SWIFT_KEEP:-}" ] || stop; exit 1; } ;;
stop) stop ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
