#!/usr/bin/env python3
"""Writes crates/kernels/src/iq_grids.rs: the lattice tables of the IQ quantization types.

IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ1_S/IQ1_M store indices into fixed tables of
8 (or 4) small integers; the tables ARE the format, so they cannot be derived, only taken
from a definition. This takes them from the `gguf` Python package (llama.cpp's gguf-py),
which carries them for its own independent decoders, and writes each entry as one
little-endian integer whose bytes are the entry's values in order (i8 for IQ1_S's -1/0/1).

    python3 -m pip install gguf numpy
    python3 scripts/gen-iq-grids.py

The output is committed; `crates/kernels/tests/layouts.rs` checks our decoders against
gguf-py's on random blocks, which also pins these tables.
"""

import os

import numpy as np
from gguf import quants

TABLES = [
    # (Rust name, gguf-py class, values per entry)
    ("IQ2XXS_GRID", quants.IQ2_XXS, 8),
    ("IQ2XS_GRID", quants.IQ2_XS, 8),
    ("IQ2S_GRID", quants.IQ2_S, 8),
    ("IQ3XXS_GRID", quants.IQ3_XXS, 4),
    ("IQ3S_GRID", quants.IQ3_S, 4),
    ("IQ1S_GRID", quants.IQ1_S, 8),
]


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    path = os.path.join(root, "crates", "kernels", "src", "iq_grids.rs")
    out = [
        "//! The IQ types' lattice tables, written by `scripts/gen-iq-grids.py` from the `gguf`",
        "//! Python package. Do not edit. Entry `i`'s values are the little-endian bytes of",
        "//! element `i` (IQ1_S's as i8: -1, 0, 1).",
        "",
    ]
    for name, cls, per in TABLES:
        cls.init_grid()
        grid = np.asarray(cls.grid, dtype=np.float32).reshape(-1, per)
        ints = grid.astype(np.int64)
        assert np.all(ints == grid), name
        rust_ty = "u64" if per == 8 else "u32"
        entries = []
        for row in ints:
            v = 0
            for k, x in enumerate(row):
                v |= (int(x) & 0xFF) << (8 * k)
            entries.append(f"0x{v:0{2 * per}x}")
        out.append(f"pub static {name}: [{rust_ty}; {len(entries)}] = [")
        step = 4 if per == 8 else 6
        for i in range(0, len(entries), step):
            out.append("    " + ", ".join(entries[i : i + step]) + ",")
        out.append("];")
        out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
