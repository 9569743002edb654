#!/usr/bin/env bash
# Checks the Debian packages libtzr builds and tests with. As root it installs
# what is missing; otherwise it prints the exact apt-get line and fails.
# Usage: scripts/deps.sh [build|test]
set -u
kind=${1:-build}
# tests/build_test.sh: which make goals reach this script.
[ -n "${TZR_DEPS_LOG:-}" ] && echo "$kind" >> "$TZR_DEPS_LOG"
build_pkgs="gcc make pkg-config libssl-dev libsodium-dev libisal-dev zlib1g-dev libjansson-dev libcurl4-openssl-dev libzstd-dev"
test_pkgs="clang libclang-rt-14-dev openmpi-bin libopenmpi-dev python3 python3-torch python3-numpy python3-pip python3-setuptools curl nginx-light swift swift-proxy swift-account swift-container swift-object python3-swiftclient"
pkgs=$build_pkgs
[ "$kind" = test ] && pkgs="$build_pkgs $test_pkgs"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "deps: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/tmp/tzr-apt.log 2>&1 || {
        echo "deps: apt-get install failed, see /tmp/tzr-apt.log" >&2
        tail -5 /tmp/tzr-apt.log >&2
        exit 1
    }
    exit 0
fi
echo "deps: missing packages; run: sudo apt-get install -y$missing" >&2
exit 1
