//! Every block format read the way someone else reads it: `tests/data/quant_layouts.txt`
//! holds random blocks of each type and the values llama.cpp's `gguf` Python package decodes
//! them to (Q8_1, which it does not decode, by hand from the GGML spec), written by
//! `scripts/gen-quant-layouts.py`. Our dequantizer must agree value for value: a wrong
//! offset, nibble order, sign or scale packing in any type shows up here, where a round trip
//! through our own quantizer would hide it.

use ferrox_kernels::{dequantize_row, GgmlType};

const FIXTURE: &str = include_str!("data/quant_layouts.txt");

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn every_block_format_decodes_as_gguf_py_decodes_it() {
    let mut seen = Vec::new();
    for line in FIXTURE.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split(' ');
        let name = fields.next().expect("a type");
        let ty = GgmlType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
            .unwrap_or_else(|| panic!("unknown type {name}"));
        let bytes = hex(fields.next().expect("bytes"));
        let want: Vec<f32> = fields.map(|v| v.parse().expect("a number")).collect();
        assert_eq!(
            bytes.len() / ty.block_bytes() * ty.block_elems(),
            want.len(),
            "{name}: the fixture's sizes"
        );
        let mut got = vec![f32::NAN; want.len()];
        dequantize_row(ty, &bytes, &mut got);
        // The decoders may round a product in another order: allow a few ulps of the
        // block's largest value, far below any layout mistake (which moves whole values).
        let amax = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= amax * 1e-6,
                "{name}: value {i} is {g}, gguf-py says {w}"
            );
        }
        seen.push(ty);
    }
    for ty in GgmlType::ALL {
        let quantized =
            !matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) && ty != GgmlType::Q8_K;
        assert!(
            !quantized || seen.contains(&ty),
            "{}: no fixture",
            ty.name()
        );
    }
}
