//! Hostile input: every way a file can lie must end in a typed error naming the field, never a
//! panic, an overflow, or an allocation sized by the lie. Also a seeded in-process mutation fuzz
//! (the same property as the `gguf_parse` cargo-fuzz target, cheap enough for every test run).

mod common;

use common::{sample_file, Raw, Rng};
use ferrox_gguf::limits::{MAX_ARRAY_DEPTH, MAX_DIMS, MAX_METADATA_VALUES};
use ferrox_gguf::{GgmlType, GgufError, GgufFile};

fn parse(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(bytes)
}

/// Asserts `r` is an error matching `pat`, printing the actual result otherwise.
macro_rules! assert_err {
    ($r:expr, $pat:pat $(if $guard:expr)?) => {
        match $r {
            Err($pat) $(if $guard)? => {}
            other => panic!("expected {}, got {:?}", stringify!($pat), other),
        }
    };
}

/// A one-tensor file (`dims`, `type_id`, `offset` as given) with a 16-byte data section.
fn one_tensor(dims: &[u64], type_id: u32, offset: u64) -> Vec<u8> {
    Raw::header(3, 1, 0)
        .tensor("t", dims, type_id, offset)
        .data(32, &[0; 16])
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample_file();
    let f = parse(bytes.clone()).unwrap();
    let end = f
        .tensors()
        .iter()
        .map(|t| f.data_offset() + t.offset + t.n_bytes)
        .max()
        .unwrap();
    for n in 0..end as usize {
        assert!(
            parse(bytes[..n].to_vec()).is_err(),
            "prefix of {n} bytes parsed"
        );
    }
    // Only the padding after the last tensor may be cut.
    for n in end as usize..=bytes.len() {
        assert!(
            parse(bytes[..n].to_vec()).is_ok(),
            "prefix of {n} bytes refused"
        );
    }
}

#[test]
fn truncation_names_the_field() {
    assert_err!(
        parse(b"GG".to_vec()),
        GgufError::Truncated { field: "magic", .. }
    );
    assert_err!(
        parse(b"GGUF\x03\0".to_vec()),
        GgufError::Truncated {
            field: "version",
            ..
        }
    );
    let r = Raw::header(3, 0, 1).str("key").u32(4).raw(&[1, 2]).bytes;
    assert_err!(
        parse(r),
        GgufError::Truncated {
            field: "metadata value",
            needed: 4,
            available: 2,
            ..
        }
    );
    let r = Raw::header(3, 1, 0).str("t").u32(2).u64(4).bytes;
    assert_err!(
        parse(r),
        GgufError::Truncated {
            field: "tensor dims",
            ..
        }
    );
}

#[test]
fn bad_magic_and_versions() {
    let mut bytes = sample_file();
    bytes[0] = b'L';
    assert_err!(
        parse(bytes),
        GgufError::BadMagic {
            found: [b'L', b'G', b'U', b'F']
        }
    );
    for v in [0, 1, 4, u32::MAX] {
        assert_err!(parse(Raw::header(v, 0, 0).bytes), GgufError::UnsupportedVersion(x) if x == v);
    }
    assert_err!(
        parse(Raw::header(3u32.swap_bytes(), 0, 0).bytes),
        GgufError::BigEndian { version: 3 }
    );
    // A v2 file with nothing in it is fine.
    assert_eq!(parse(Raw::header(2, 0, 0).bytes).unwrap().version(), 2);
}

#[test]
fn absurd_counts() {
    let r = Raw::header(3, u64::MAX, 0).bytes;
    assert_err!(
        parse(r),
        GgufError::CountTooLarge {
            field: "tensor_count",
            count: u64::MAX,
            max: 0,
            ..
        }
    );
    let r = Raw::header(3, 0, u64::MAX).raw(&[0; 26]).bytes;
    assert_err!(
        parse(r),
        GgufError::CountTooLarge {
            field: "metadata_kv_count",
            max: 2,
            ..
        }
    );
    // An array of u64 claiming 2^60 elements.
    let r = Raw::header(3, 0, 1)
        .str("a")
        .u32(9)
        .u32(10)
        .u64(1 << 60)
        .raw(&[0; 64])
        .bytes;
    assert_err!(
        parse(r),
        GgufError::CountTooLarge {
            field: "array length",
            max: 8,
            ..
        }
    );
    // An array of strings: each needs 8 bytes at least.
    let r = Raw::header(3, 0, 1)
        .str("a")
        .u32(9)
        .u32(8)
        .u64(3)
        .raw(&[0; 16])
        .bytes;
    assert_err!(
        parse(r),
        GgufError::CountTooLarge {
            field: "array length",
            count: 3,
            max: 2,
            ..
        }
    );
}

#[test]
fn value_budget_caps_honest_looking_arrays() {
    let n = MAX_METADATA_VALUES; // plus the array itself: one value over
    let r = Raw::header(3, 0, 1)
        .str("a")
        .u32(9)
        .u32(0)
        .u64(n)
        .raw(&vec![0; n as usize])
        .bytes;
    assert_err!(parse(r), GgufError::TooManyValues { .. });
}

#[test]
fn absurd_string_lengths() {
    let r = Raw::header(3, 0, 1)
        .u64(1 << 63)
        .raw(b"key")
        .raw(&[0; 16])
        .bytes;
    assert_err!(
        parse(r),
        GgufError::StringTooLong {
            field: "metadata key",
            len: 0x8000_0000_0000_0000,
            ..
        }
    );
    let r = Raw::header(3, 0, 1).str("k").u32(8).u64(u64::MAX).bytes;
    assert_err!(
        parse(r),
        GgufError::StringTooLong {
            field: "metadata string",
            ..
        }
    );
    // Under the cap but past the end of the file.
    let r = Raw::header(3, 0, 1)
        .str("k")
        .u32(8)
        .u64(1000)
        .raw(b"short")
        .bytes;
    assert_err!(
        parse(r),
        GgufError::Truncated {
            field: "metadata string",
            needed: 1000,
            available: 5,
            ..
        }
    );
    let long = "x".repeat(64);
    assert_err!(
        parse(one_tensor_named(&long)),
        GgufError::StringTooLong {
            field: "tensor name",
            len: 64,
            ..
        }
    );
}

fn one_tensor_named(name: &str) -> Vec<u8> {
    Raw::header(3, 1, 0)
        .tensor(name, &[4], 0, 0)
        .data(32, &[0; 16])
}

#[test]
fn invalid_utf8() {
    let r = Raw::header(3, 0, 1)
        .u64(2)
        .raw(&[0xff, 0xfe])
        .u32(0)
        .raw(&[0])
        .bytes;
    assert_err!(
        parse(r),
        GgufError::InvalidUtf8 {
            field: "metadata key",
            offset: 24
        }
    );
    let r = Raw::header(3, 1, 0)
        .u64(1)
        .raw(&[0x80])
        .u32(1)
        .u64(4)
        .u32(0)
        .u64(0)
        .data(32, &[0; 16]);
    assert_err!(
        parse(r),
        GgufError::InvalidUtf8 {
            field: "tensor name",
            ..
        }
    );
}

#[test]
fn unknown_value_types() {
    let r = Raw::header(3, 0, 1).kv("k", 13, &[0; 8]).bytes;
    assert_err!(parse(r), GgufError::BadValueType { type_id: 13, .. });
    let r = Raw::header(3, 0, 1)
        .kv("k", 9, &[99, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0])
        .bytes;
    assert_err!(parse(r), GgufError::BadValueType { type_id: 99, ref key } if key == "k");
    let r = Raw::header(3, 0, 1).kv("b", 7, &[2]).bytes;
    assert_err!(parse(r), GgufError::BadBool { byte: 2, .. });
}

#[test]
fn nesting_bomb() {
    let levels = 100_000;
    let mut r = Raw::header(3, 0, 1).str("bomb").u32(9);
    for _ in 0..levels {
        r = r.u32(9).u64(1);
    }
    let bytes = r.u32(0).u64(0).bytes;
    assert_err!(
        parse(bytes),
        GgufError::TooDeep {
            max: MAX_ARRAY_DEPTH,
            ..
        }
    );

    // `depth` arrays, each holding the next, the innermost holding one u8.
    let nested = |depth: usize| {
        let mut r = Raw::header(3, 0, 1).str("ok").u32(9);
        for _ in 1..depth {
            r = r.u32(9).u64(1);
        }
        r.u32(0).u64(1).raw(&[7]).bytes
    };
    assert_err!(
        parse(nested(MAX_ARRAY_DEPTH + 1)),
        GgufError::TooDeep { .. }
    );
    // Exactly the cap is fine.
    let f = parse(nested(MAX_ARRAY_DEPTH)).unwrap();
    let mut v = f.get("ok").unwrap();
    for _ in 0..MAX_ARRAY_DEPTH {
        v = &v.as_array().unwrap()[0];
    }
    assert_eq!(v.as_u64(), Some(7));
}

#[test]
fn duplicates() {
    let r = Raw::header(3, 0, 2).kv("k", 0, &[1]).kv("k", 0, &[2]).bytes;
    assert_err!(parse(r), GgufError::DuplicateKey(ref k) if k == "k");
    let r = Raw::header(3, 2, 0)
        .tensor("t", &[4], 0, 0)
        .tensor("t", &[4], 0, 0)
        .data(32, &[0; 16]);
    assert_err!(parse(r), GgufError::DuplicateTensor(ref t) if t == "t");
}

#[test]
fn bad_dims_and_types() {
    let mut r = Raw::header(3, 1, 0).str("t").u32(1000);
    for _ in 0..1000 {
        r = r.u64(1);
    }
    let bytes = r.u32(0).u64(0).data(32, &[0; 4]);
    assert_err!(
        parse(bytes),
        GgufError::TooManyDims {
            n_dims: 1000,
            max: MAX_DIMS,
            ..
        }
    );
    let r = Raw::header(3, 1, 0)
        .str("t")
        .u32(u32::MAX)
        .raw(&[0; 32])
        .bytes;
    assert_err!(
        parse(r),
        GgufError::TooManyDims {
            n_dims: u32::MAX,
            ..
        }
    );

    assert_err!(
        parse(one_tensor(&[4], 4, 0)),
        GgufError::UnsupportedTensorType { type_id: 4, .. }
    );
    // A type ggml defines but this crate does not read is refused by its name.
    let msg = parse(one_tensor(&[256], 31, 0)).unwrap_err().to_string();
    assert!(msg.contains("q4_0_4_4") && msg.contains("31"), "{msg}");
    assert_err!(
        parse(one_tensor(&[4], 1000, 0)),
        GgufError::UnsupportedTensorType { type_id: 1000, ref tensor } if tensor == "t"
    );
    let q4k = GgmlType::Q4_K as u32;
    assert_err!(
        parse(one_tensor(&[100], q4k, 0)),
        GgufError::PartialBlock {
            cols: 100,
            block_elems: 256,
            ..
        }
    );
    assert_err!(
        parse(one_tensor(&[1 << 32, 1 << 32], 0, 0)),
        GgufError::ShapeOverflow { .. }
    );
    // Fits in u64 elements but not in bytes.
    assert_err!(
        parse(one_tensor(&[1 << 62], 0, 0)),
        GgufError::ShapeOverflow { .. }
    );
}

#[test]
fn offsets_outside_or_misaligned() {
    assert!(parse(one_tensor(&[4], 0, 0)).is_ok());
    assert_err!(
        parse(one_tensor(&[4], 0, 16)),
        GgufError::MisalignedTensor {
            offset: 16,
            alignment: 32,
            ..
        }
    );
    assert_err!(
        parse(one_tensor(&[4], 0, 1 << 40)),
        GgufError::TensorOutOfBounds { data_bytes: 16, .. }
    );
    assert_err!(
        parse(one_tensor(&[4], 0, u64::MAX - 31)),
        GgufError::TensorOutOfBounds { .. }
    );
    assert_err!(
        parse(one_tensor(&[5], 0, 0)),
        GgufError::TensorOutOfBounds {
            n_bytes: 20,
            data_bytes: 16,
            ..
        }
    );
    assert_err!(
        parse(one_tensor(&[1 << 40], 0, 0)),
        GgufError::TensorOutOfBounds { .. }
    );
    // Data section empty.
    let r = Raw::header(3, 1, 0).tensor("t", &[4], 0, 0).data(32, &[]);
    assert_err!(parse(r), GgufError::TensorOutOfBounds { data_bytes: 0, .. });
    // An empty tensor still needs the file to reach the data section (found by cargo-fuzz).
    let r = Raw::header(3, 1, 0).tensor("t", &[0], 0, 0).bytes;
    assert_err!(
        parse(r),
        GgufError::Truncated {
            field: "data section padding",
            ..
        }
    );
}

#[test]
fn bad_alignment_values() {
    for a in [0u32, 3, 48, 1 << 30] {
        let r = Raw::header(3, 0, 1)
            .kv("general.alignment", 4, &a.to_le_bytes())
            .bytes;
        assert_err!(parse(r), GgufError::BadAlignment { value, .. } if value == u64::from(a));
    }
    let r = Raw::header(3, 0, 1)
        .kv(
            "general.alignment",
            8,
            &[2, 0, 0, 0, 0, 0, 0, 0, b'3', b'2'],
        )
        .bytes;
    assert_err!(
        parse(r),
        GgufError::WrongType {
            expected: "unsigned integer",
            found: "string",
            ..
        }
    );
    // Alignment 64 moves the data section and the offsets' grid.
    let r = Raw::header(3, 1, 1)
        .kv("general.alignment", 4, &64u32.to_le_bytes())
        .tensor("t", &[4], 0, 32);
    assert_err!(
        parse(r.data(64, &[0; 64])),
        GgufError::MisalignedTensor { alignment: 64, .. }
    );
}

/// Interesting numbers to splice over a length or count field.
const BIG: [u64; 8] = [
    0,
    1,
    0x7f,
    0xffff_ffff,
    1 << 32,
    1 << 63,
    u64::MAX,
    u64::MAX - 31,
];

/// One random edit of `bytes`.
fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    let n = bytes.len().max(1);
    match rng.below(6) {
        0 if !bytes.is_empty() => {
            let i = rng.below(n);
            bytes[i] ^= 1 << rng.below(8);
        }
        1 if !bytes.is_empty() => {
            let i = rng.below(n);
            bytes[i] = rng.next() as u8;
        }
        2 if bytes.len() >= 8 => {
            let i = rng.below(bytes.len() - 7);
            let v = BIG[rng.below(BIG.len())];
            let w = if rng.below(2) == 0 { 8 } else { 4 };
            bytes[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
        }
        3 => bytes.truncate(rng.below(n + 1)),
        4 => {
            let i = rng.below(n + 1).min(bytes.len());
            let v = BIG[rng.below(BIG.len())];
            bytes.splice(i..i, v.to_le_bytes());
        }
        _ if !bytes.is_empty() => {
            let i = rng.below(n);
            let len = rng.below(16).min(bytes.len() - i);
            bytes.drain(i..i + len);
        }
        _ => {}
    }
}

/// Seeded mutation fuzz. 200k iterations take about a second with the workspace's optimized test
/// profile. Set FERROX_FUZZ_ITERS to run longer, FERROX_FUZZ_SEED to reproduce a failure.
#[test]
fn mutation_fuzz_never_panics() {
    let iters: u64 = std::env::var("FERROX_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let seed: u64 = std::env::var("FERROX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_6775);
    let base = sample_file();
    let mut rng = Rng(seed);
    let (mut ok, mut err) = (0u64, 0u64);
    for i in 0..iters {
        let mut bytes = base.clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut bytes);
        }
        let result = std::panic::catch_unwind(|| match GgufFile::from_bytes(bytes.clone()) {
            Ok(f) => {
                let mut sum = 0u64;
                for t in f.tensors() {
                    let data = f.tensor_data(t);
                    assert_eq!(data.len() as u64, t.n_bytes);
                    sum = sum.wrapping_add(data.iter().map(|&b| u64::from(b)).sum::<u64>());
                }
                let _ = f.get_str("general.architecture");
                let _ = sum;
                true
            }
            Err(e) => {
                let _ = e.to_string();
                false
            }
        });
        match result {
            Ok(true) => ok += 1,
            Ok(false) => err += 1,
            Err(_) => panic!("iteration {i} (seed {seed}) panicked on input {bytes:02x?}"),
        }
    }
    // Both outcomes must be common, or the mutations are too weak or too destructive.
    assert!(ok > iters / 100 && err > iters / 10, "ok {ok}, err {err}");
}

/// Not a test: writes seed inputs for the `gguf_parse` cargo-fuzz target into
/// `$FERROX_FUZZ_SEED_DIR` (see `fuzz/fuzz_targets/gguf_parse.rs`).
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir = std::env::var("FERROX_FUZZ_SEED_DIR").expect("set FERROX_FUZZ_SEED_DIR");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(format!("{dir}/sample"), sample_file()).unwrap();
    std::fs::write(format!("{dir}/one_tensor"), one_tensor(&[4], 0, 0)).unwrap();
    std::fs::write(format!("{dir}/v2_empty"), Raw::header(2, 0, 0).bytes).unwrap();
}
