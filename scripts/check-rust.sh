#!/usr/bin/env bash
# Is there a Rust toolchain new enough to build the load engine? Says which
# version it found and what to do when not (make's `rust` step runs it).
set -euo pipefail
need="${1:?usage: check-rust.sh MIN_VERSION}"
advice="install Rust $need or newer with rustup (https://rustup.rs), or install a wheel built
on another machine with 'make wheel': pipx install dbtester-*.whl needs no compiler"
if ! command -v cargo >/dev/null 2>&1; then
    echo "error: dbtester's load engine is Rust, and there is no cargo on PATH: $advice" >&2
    exit 1
fi
found="$(cargo --version | awk '{print $2}')"
lowest="$(printf '%s\n%s\n' "$need" "${found%%-*}" | sort -V | head -n1)"
if [ "$lowest" != "$need" ]; then
    echo "error: dbtester's load engine needs Rust $need or newer, and $(command -v cargo) is $found: $advice" >&2
    exit 1
fi
