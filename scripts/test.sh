#!/usr/bin/env bash
# The whole test suite: fetch the default model if it is not cached, then every Rust test
# (unit, property, golden and HTTP tests; a test that needs the model fails without it), the
# fuzz target over its seeds, the Python client tests against a live server, and the
# scale-out test through a gateway. Every stage runs even when an earlier one failed, so one
# run reports every failure; the exit status is non-zero if any stage failed, and the stages
# that failed are listed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."

# Without the model most stages cannot mean anything: stop here if it cannot be fetched.
cargo run -q -p ferrox -- pull || exit 1
# The model is there now: a test that cannot find it fails instead of skipping.
export FERROX_REQUIRE_MODEL=1

failed=()
stage() { # name command...
    local name=$1
    shift
    echo "=== $name"
    if ! "$@"; then
        echo "=== $name: FAILED"
        failed+=("$name")
    fi
}

# The fuzz target lives outside the workspace (cargo-fuzz runs it on nightly): build it on
# stable so it cannot rot, and run it once over the parser's seeds and every regression input
# (files given directly are executed once each, with the target's own checks).
fuzz_seeds() {
    cargo build -q --manifest-path fuzz/Cargo.toml || return 1
    local seeds
    seeds=$(mktemp -d)
    FERROX_FUZZ_SEED_DIR="$seeds" cargo test -q -p ferrox-gguf --test hostile -- --ignored \
        write_fuzz_seeds >/dev/null || { rm -rf "$seeds"; return 1; }
    fuzz/target/debug/gguf_parse "$seeds"/* crates/gguf/tests/regressions/*.bin 2>&1 | tail -1
    local status=${PIPESTATUS[0]}
    rm -rf "$seeds"
    return "$status"
}

stage "cargo test" cargo test --workspace --no-fail-fast
stage "fuzz seeds" fuzz_seeds
stage "python clients" bash scripts/client-tests.sh
# Two replicas behind the SGLang Model Gateway (docs/DEPLOY.md).
stage "scale-out" bash scripts/scale-out.sh

if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED stages: ${failed[*]}"
    exit 1
fi
echo "all stages passed"
