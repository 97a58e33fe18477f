#!/usr/bin/env bash
# The whole test suite: fetch the default model if it is not cached, then every Rust test
# (unit, property, golden and HTTP tests), then the Python client tests against a live server.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo run -q -p ferrox -- pull
cargo test --workspace --no-fail-fast
if [ -x scripts/client-tests.sh ]; then
    scripts/client-tests.sh
fi
