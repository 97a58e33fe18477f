#!/usr/bin/env python3
"""Writes crates/kernels/tests/data/quant_layouts.txt: quantized blocks and what they decode
to, according to a decoder that is not ours.

Each line is `TYPE HEX V0 V1 ...`: random block bytes (every f16 scale field set to a sane
value, at the offsets the GGML spec gives, so that nothing decodes to inf or NaN) and the
values the `gguf` Python package (llama.cpp's gguf-py, a numpy implementation written
independently of ours and of ggml's C) decodes them to. Q8_1, which gguf-py does not decode,
is decoded here by hand from the spec (`d * qs[i]`; `s` is a sum the decoder ignores).

    python3 -m pip install gguf numpy
    python3 scripts/gen-quant-layouts.py

The test `crates/kernels/tests/layouts.rs` decodes the same bytes with our kernels. The output
is committed, so the test suite needs neither package.
"""

import os
import random
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# (type, bytes per block, offsets of its f16 scale fields), from ggml-common.h.
LAYOUTS = [
    ("Q4_0", T.Q4_0, 18, [0]),
    ("Q4_1", T.Q4_1, 20, [0, 2]),
    ("Q5_0", T.Q5_0, 22, [0]),
    ("Q5_1", T.Q5_1, 24, [0, 2]),
    ("Q8_0", T.Q8_0, 34, [0]),
    ("Q8_1", None, 36, [0, 2]),
    ("Q2_K", T.Q2_K, 84, [80, 82]),
    ("Q3_K", T.Q3_K, 110, [108]),
    ("Q4_K", T.Q4_K, 144, [0, 2]),
    ("Q5_K", T.Q5_K, 176, [0, 2]),
    ("Q6_K", T.Q6_K, 210, [208]),
    ("IQ4_NL", T.IQ4_NL, 18, [0]),
    ("IQ4_XS", T.IQ4_XS, 136, [0]),
    ("MXFP4", T.MXFP4, 17, []),
    ("IQ2_XXS", T.IQ2_XXS, 66, [0]),
    ("IQ2_XS", T.IQ2_XS, 74, [0]),
    ("IQ2_S", T.IQ2_S, 82, [0]),
    ("IQ3_XXS", T.IQ3_XXS, 98, [0]),
    ("IQ3_S", T.IQ3_S, 110, [0]),
    ("IQ1_S", T.IQ1_S, 50, [0]),
    ("IQ1_M", T.IQ1_M, 56, []),
    ("TQ1_0", T.TQ1_0, 54, [52]),
    ("TQ2_0", T.TQ2_0, 66, [64]),
]
# Types whose first byte is an E8M0 exponent: kept in 100..156 (255 is NaN, the extremes
# are not what a layout test is about).
E8M0 = {"MXFP4"}
BLOCKS = 2


def block(rng, size, scales):
    b = bytearray(rng.getrandbits(8) for _ in range(size))
    for o in scales:
        b[o : o + 2] = struct.pack("<e", rng.uniform(-1.0, 1.0))
    return bytes(b)


def q8_1(data):
    out = []
    for i in range(0, len(data), 36):
        (d,) = struct.unpack("<e", data[i : i + 2])
        qs = struct.unpack("<32b", data[i + 4 : i + 36])
        out.extend(np.float32(np.float32(d) * np.float32(q)) for q in qs)
    return np.array(out, dtype=np.float32)


def main():
    rng = random.Random(20261201)
    root = os.path.join(os.path.dirname(__file__), "..")
    path = os.path.join(root, "crates", "kernels", "tests", "data", "quant_layouts.txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("# Written by scripts/gen-quant-layouts.py (gguf-py decodes). Do not edit.\n")
        for name, qtype, size, scales in LAYOUTS:
            for _ in range(3):
                blocks = [bytearray(block(rng, size, scales)) for _ in range(BLOCKS)]
                if name in E8M0:
                    for b in blocks:
                        b[0] = rng.randrange(100, 157)
                if name == "IQ1_M":
                    # Its f16 scale lives in the top nibbles of the four scale words (bytes
                    # 48..56): set them to a random sane f16.
                    for b in blocks:
                        bits = struct.unpack("<H", struct.pack("<e", rng.uniform(-1.0, 1.0)))[0]
                        for i in range(4):
                            hi = 48 + 2 * i + 1
                            b[hi] = (b[hi] & 0x0F) | (((bits >> (4 * i)) & 0xF) << 4)
                data = b"".join(bytes(b) for b in blocks)
                if qtype is None:
                    values = q8_1(data)
                else:
                    values = dequantize(np.frombuffer(data, dtype=np.uint8), qtype)
                values = np.asarray(values, dtype=np.float32).ravel()
                assert np.all(np.isfinite(values)), name
                # repr of a float32 widened to a float is exact; the test parses it as f32.
                numbers = " ".join(repr(float(v)) for v in values)
                f.write(f"{name} {data.hex()} {numbers}\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
