#!/usr/bin/env bash
# The whole test suite: fetch the default model if it is not cached, then every Rust test
# (unit, property, golden and HTTP tests; a test that needs the model fails without it), then
# the Python client tests against a live server, then the scale-out test through a gateway.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo run -q -p ferrox -- pull
# The model is there now: a test that cannot find it fails instead of skipping.
export FERROX_REQUIRE_MODEL=1
cargo test --workspace --no-fail-fast
# The fuzz target lives outside the workspace (cargo-fuzz runs it on nightly): build it on
# stable so it cannot rot, and run it once over the parser's seeds and every regression input
# (files given directly are executed once each, with the target's own checks).
cargo build -q --manifest-path fuzz/Cargo.toml
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
FERROX_FUZZ_SEED_DIR="$seeds" cargo test -q -p ferrox-gguf --test hostile -- --ignored \
    write_fuzz_seeds >/dev/null
fuzz/target/debug/gguf_parse "$seeds"/* crates/gguf/tests/regressions/*.bin 2>&1 | tail -1
bash scripts/client-tests.sh
# Two replicas behind the SGLang Model Gateway (docs/DEPLOY.md).
bash scripts/scale-out.sh
