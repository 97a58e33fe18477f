#!/usr/bin/env bash
# The whole test suite: fetch the default model if it is not cached, then every Rust test
# (unit, property, golden and HTTP tests; a test that needs the model fails without it), then
# the Python client tests against a live server.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo run -q -p ferrox -- pull
# The model is there now: a test that cannot find it fails instead of skipping.
export FERROX_REQUIRE_MODEL=1
cargo test --workspace --no-fail-fast
bash scripts/client-tests.sh
