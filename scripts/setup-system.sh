#!/usr/bin/env bash
# Install the system packages dbtester needs, once. Idempotent: when everything
# is present it only checks and says so. Run as root (or with sudo available).
#   - Java + Debian's ZooKeeper 3.8.0 (the zookeeper package starts no service)
#   - dpkg-deb/apt-get to unpack Debian's etcd-server 3.4.23 without installing it
#   - Go, to build etcd >= 3.5, Consul and kine through the Go module proxy
#   - gcc, for kine's SQLite driver (cgo)
#   - PostgreSQL's server, which the agent starts for kine's backend: postgres
#   - openssh, iproute2, python3-venv for the multi-host test (sshd in namespaces)
#   - nftables: the agent's `isolate` fault (a firewall table; also in that test)
#   - chromium, which the report's browser test drives headless through Playwright
set -euo pipefail

need=()
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
dpkg-query -W -f='${Status}' zookeeper 2>/dev/null | grep -q " installed" || need+=(zookeeper)
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)   # kine's SQLite is cgo
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)  # kine's
command -v openssl >/dev/null 2>&1 || need+=(openssl)   # TLS tests make certificates
command -v strace >/dev/null 2>&1 || need+=(strace)     # the agent fuzz harness traces it
# The multi-host test: sshd per namespace host, ssh-keygen, ip netns, venvs there.
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# `isolate` cuts a member's host off with an nftables table (the agent runs nft).
[ -x /usr/sbin/nft ] || command -v nft >/dev/null 2>&1 || need+=(nftables)
# The report's browser test (tests/e2e/test_report.py): `playwright install`
# would download a browser from outside the package registries; Debian's is used.
[ -x /usr/bin/chromium ] || need+=(chromium)

# apt-get download needs package lists; a fresh image may have none.
lists_empty=0
if ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then lists_empty=1; fi

if [ ${#need[@]} -eq 0 ] && [ $lists_empty -eq 0 ]; then
    echo "system packages: all present"
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "error: need root to install: ${need[*]:-apt package lists}" >&2
        echo "  run: apt-get update && apt-get install -y ${need[*]}" >&2
        exit 1
    fi
fi

echo "system packages: installing ${need[*]:-(package lists only)}"
$sudo apt-get update -qq
if [ ${#need[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "system packages: done"
