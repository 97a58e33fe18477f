# Shared by the side-by-side benchmark scripts: where llama.cpp is built and how.
# Source it; it defines LCPP, MODEL, build_llama_cpp (idempotent) and build_ferrox.
#
# llama.cpp comes from the llama-cpp-python sdist (it vendors llama.cpp), fetched with
# `pip download` by package name, and is built into a cache directory OUTSIDE the
# repository: nothing of llama.cpp is committed.

VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE=${FERROX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrox}
LCPP=${LLAMA_CPP_DIR:-$CACHE/llama.cpp-$VERSION}
MODEL=${FERROX_MODEL:-$CACHE/models/gemma-3-270m-q4_k_m.gguf}

# ISA=avx2 compares the AVX2 spellings: llama.cpp built a second time without the host's own
# flags (AVX/AVX2/FMA/F16C/BMI2; no AVX-512, no AVX-VNNI) into LCPP/build-avx2, and ferrox
# forced to its `avx2` spelling (FERROX_ISA). On an AVX-512 host this stands in for an
# AVX2-only one. ISA=native (the default) builds both for the host.
case "${ISA:-native}" in
native) LCPP_BUILD=$LCPP/build ;;
avx2)
    LCPP_BUILD=$LCPP/build-avx2
    export FERROX_ISA=avx2
    ;;
*)
    echo "ISA=$ISA: one of native, avx2" >&2
    exit 2
    ;;
esac

build_llama_cpp() {
    if [ -x "$LCPP_BUILD/bin/llama-bench" ] && [ -x "$LCPP_BUILD/bin/llama-batched-bench" ] &&
        [ -x "$LCPP_BUILD/bin/llama-server" ]; then
        return
    fi
    mkdir -p "$LCPP"
    local src="$LCPP/llama_cpp_python-$VERSION/vendor/llama.cpp"
    command -v cmake >/dev/null || python3 -m pip install --quiet cmake
    if [ ! -d "$src" ]; then
        # The sdist, fetched by package name through pip. Preparing its metadata runs its
        # build backend (scikit-build-core, which wants cmake): installed here once and used
        # in place (`--no-build-isolation`), since an isolated build env would build cmake
        # from source.
        python3 -c 'import scikit_build_core' 2>/dev/null ||
            python3 -m pip install --quiet scikit-build-core
        python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
            "llama-cpp-python==$VERSION" -d "$LCPP/dl"
        tar -xzf "$LCPP"/dl/llama_cpp_python-"$VERSION".tar.gz -C "$LCPP"
    fi
    # Native, but without AMX: the vendored llama.cpp's AMX matmul dies on an illegal
    # instruction on its worker threads (its first `tilezero`, seen on a Xeon with AMX-INT8,
    # 2026-12-05; llama.cpp pull request 26954, open then, mends its tile set-up), so on such
    # hosts a native build cannot run at all. Users there build without AMX; so does this,
    # and comparisons on AMX hosts are against llama.cpp's AVX-512 kernels. On CPUs without
    # AMX these flags change nothing.
    local noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    local isa=(-DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx")
    if [ "$LCPP_BUILD" = "$LCPP/build-avx2" ]; then
        isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
            -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
            -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF)
    fi
    cmake -S "$src" -B "$LCPP_BUILD" -DCMAKE_BUILD_TYPE=Release "${isa[@]}" \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF >"$LCPP_BUILD.cmake.log"
    cmake --build "$LCPP_BUILD" -j2 --target llama-bench llama-batched-bench llama-server \
        >"$LCPP_BUILD.build.log"
}


# Sets FERROX to the ferrox binary under test (FERROX_BIN, else the release build, built
# here) and fetches the default model if it is missing. With SHAPE=gemma3-4b, llama3-8b or
# qwen3moe-30b-a3b (QUANT=q4_k_m or q8_0; LAYERS=N for fewer layers than the shape has), MODEL
# becomes a random-weight model of that real shape, written once by `ferrox bench model` and
# cached: both engines then run the very same file.
build_ferrox() {
    if [ -z "${FERROX_BIN:-}" ]; then
        cargo build -q --release -p ferrox
    fi
    FERROX=${FERROX_BIN:-target/release/ferrox}
    if [ -n "${SHAPE:-}" ]; then
        MODEL=$("$FERROX" bench model --shape "$SHAPE" --quant "${QUANT:-q4_k_m}" \
            ${LAYERS:+--layers "$LAYERS"})
    fi
    [ -f "$MODEL" ] || "$FERROX" pull
}

# Waits until the server PID answers /health on 127.0.0.1:PORT (at most 120 s); if it dies
# or never answers, prints its LOG and fails.  Usage: wait_healthy PID PORT LOG
wait_healthy() {
    for _ in $(seq 1 1200); do
        kill -0 "$1" 2>/dev/null || { cat "$3" >&2; return 1; }
        curl -sf "http://127.0.0.1:$2/health" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "no /health on port $2 within 120 s; the server's log: $3" >&2
    return 1
}

# Starts `ferrox serve -t THREADS` on 127.0.0.1:PORT (logging to LOG), waits for /health and
# stops it when the script exits; sets FERROX_PID.  Usage: serve_ferrox PORT THREADS LOG
serve_ferrox() {
    "$FERROX" serve -t "$2" --host 127.0.0.1 --port "$1" >"$3" 2>&1 &
    FERROX_PID=$!
    trap 'kill "$FERROX_PID" 2>/dev/null || true' EXIT
    wait_healthy "$FERROX_PID" "$1" "$3"
}
