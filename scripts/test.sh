#!/usr/bin/env bash
# Run every test: build the whole workspace once (the end-to-end tests run
# the real binaries of every member), then all unit and integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --locked --all-targets
cargo test --workspace --locked
