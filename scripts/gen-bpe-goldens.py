#!/usr/bin/env python3
"""Byte-level BPE token ids from llama.cpp's `llama-tokenize`, one golden file for every
pre-tokenizer family ferrox reads (`tokenizer.ggml.pre`).

No real vocabulary of these families can be fetched here (tiktoken's o200k and the Llama 3 /
Qwen 2 files are downloads, not registry packages), so this script builds one to the
families' rules: GPT-2's 256 byte characters, then merges learned by plain BPE on a fixed
corpus (English, code, numbers, accented and CJK text), then special tokens — control ones
and gpt-oss's harmony markers (which llama.cpp renders as user-defined). Each family gets the
same vocabulary with its own `pre` name, written into a vocabulary-only GGUF (the `gguf`
package), and every row of the test texts is tokenized by `llama-tokenize` with and without
special-token parsing. Output: `crates/engine/tests/data/bpe_goldens.json`, which
`engine/tests/tokenizer_bpe_llamacpp.rs` compares ours against.

Usage: scripts/gen-bpe-goldens.py [LLAMA_TOKENIZE]   (default: the cached llama.cpp build)
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates/engine/tests/data/bpe_goldens.json")
CACHE = os.environ.get("FERROX_CACHE_DIR", os.path.expanduser("~/.cache/ferrox"))
TOKENIZE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    CACHE, "llama.cpp-0.3.36/build/bin/llama-tokenize")

# Every `tokenizer.ggml.pre` family we implement, by one of its names.
FAMILIES = ["default", "llama-bpe", "gpt-2", "qwen2", "starcoder", "falcon", "gpt-4o", "glm4", "tekken"]

CORPUS = """
The quick brown fox jumps over the lazy dog. It's what they're doing, isn't it? We'll see.
fn main() { let total = items.iter().map(|x| x.price * 2).sum::<u64>(); println!("{total}"); }
def parse(text):  return [int(t) for t in text.split(",") if t.strip()]
The server answered 200 OK after 1234567 microseconds; 3.14159 is pi, 2026-12-03 is today.
HTMLParser, XMLHttpRequest and getElementById are camelCase; SNAKE_CASE_NAMES are not.
Ünïcödé ÀÉÎÕÜ façade naïve Straße; Привет мир; こんにちは世界、東京タワー。中文字符测试。
Email me at someone@example.com or visit https://example.org/path?query=1&x=2#frag.
    indented code with    runs of   spaces and\ttabs\t\tand trailing   
the the the and and of of to to in in is is that that for for with with on on
""" * 3

TEXTS = [
    "Hello world's 12345",
    "The quick brown fox jumps over the lazy dog.",
    "It's, they're, we'll, I'd, you've, isn't — CAN'T and DON'T",
    "1234567890 12 345 6789 3.14159 -42 1e10",
    "HTMLParser XMLHttpRequest getElementById helloWorld ABCdef",
    "fn main() {\n    let x = vec![1, 2, 3];\n\tprintln!(\"{x:?}\");\n}\n",
    "def f(a, b):\n    return a+b  # sum\n\n\n",
    "    leading spaces, trailing spaces    ",
    "line one\nline two\r\n\r\nline four\n\n\n",
    "a  b   c    d     e\t\tf",
    "Ünïcödé ÀÉÎÕÜ façade naïve Straße",
    "こんにちは世界、東京タワー。中文字符测试。",
    "Привет, мир! Καλημέρα κόσμε",
    "emoji 👋🏽 family 👨‍👩‍👧 flags 🇫🇷 ✨",
    "https://example.org/path?query=1&x=2#frag someone@example.com",
    "<|endoftext|>text after<|endoftext|>",
    "<|start|>assistant<|channel|>analysis<|message|>think<|end|>",
    "!!! ??? ... --- ___ /// \\\\ ''' \"\"\" ```",
    "",
    " ",
]

SPECIALS = [("<|endoftext|>", 3), ("<|start|>", 3), ("<|end|>", 3), ("<|message|>", 3),
            ("<|channel|>", 3), ("<|return|>", 3), ("<|call|>", 3)]
N_MERGES = 600


def byte_chars():
    """GPT-2's table: printable Latin-1 maps to itself, the other bytes to U+0100.."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def learn_merges(table):
    """Plain BPE over whitespace-led words of the corpus, ties to the earliest pair."""
    import regex
    # Contractions are their own words, so merges like `'s` exist and the families that
    # keep them on the word (gpt-4o) and those that do not (Tekken) give different ids.
    words = regex.findall(r"'(?:s|t|re|ve|m|ll|d)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+",
                          CORPUS)
    counts = collections.Counter(tuple(table[b] for b in w.encode()) for w in words)
    merges = []
    for _ in range(N_MERGES):
        pairs = collections.Counter()
        for w, c in counts.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: kv[1])[0]
        merges.append(best)
        merged = collections.Counter()
        for w, c in counts.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        counts = merged
    return merges


def write_vocab(path, pre, tokens, types, merges):
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(128)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|return|>"))
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tokenize(path, text, parse_special):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode())
        name = f.name
    args = [TOKENIZE, "-m", path, "-f", name, "--ids", "--log-disable", "--no-escape",
            "--no-bos"] + ([] if parse_special else ["--no-parse-special"])
    try:
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(name)
    return json.loads(out.strip().splitlines()[-1])


def main():
    table = byte_chars()
    merges = learn_merges(table)
    tokens = [table[b] for b in range(256)]
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            tokens.append(a + b)
            seen.add(a + b)
    types = [1] * len(tokens)
    for text, kind in SPECIALS:
        tokens.append(text)
        types.append(kind)
    families = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pre in FAMILIES:
            path = os.path.join(tmp, f"{pre}.gguf")
            write_vocab(path, pre, tokens, types, merges)
            rows = []
            for text in TEXTS:
                for special in (True, False):
                    rows.append({"text": text, "parse_special": special,
                                 "ids": tokenize(path, text, special)})
            families[pre] = rows
    golden = {
        "about": "llama-tokenize ids on a vocabulary built by scripts/gen-bpe-goldens.py",
        "tokens": tokens,
        "token_types": types,
        "merges": [f"{a} {b}" for a, b in merges],
        "bos": "<|endoftext|>",
        "eos": "<|return|>",
        "families": families,
    }
    with open(OUT, "w") as f:
        json.dump(golden, f, ensure_ascii=False, indent=None)
        f.write("\n")
    print(f"wrote {OUT}: {len(tokens)} tokens, {len(merges)} merges, "
          f"{sum(len(r) for r in families.values())} rows")


if __name__ == "__main__":
    main()
