//! Any bytes in: `GgufFile::from_bytes` must return `Ok` or a typed error, never panic, and
//! every tensor of an accepted file must slice to exactly its declared size.
//!
//! Run: `cargo +nightly fuzz run gguf_parse -- -max_total_time=300`. Seed the corpus with
//! `FERROX_FUZZ_SEED_DIR=$PWD/fuzz/corpus/gguf_parse cargo test -p ferrox-gguf --test hostile
//! -- --ignored write_fuzz_seeds`. Crashes go to `crates/gguf/tests/regressions/`.

#![no_main]

use ferrox_gguf::GgufFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = GgufFile::from_bytes(data.to_vec()) {
        let mut sum = 0u8;
        for t in f.tensors() {
            let bytes = f.tensor_data(t);
            assert_eq!(bytes.len() as u64, t.n_bytes);
            sum = bytes.iter().fold(sum, |a, &b| a.wrapping_add(b));
        }
        for (k, v) in f.metadata() {
            assert!(f.get(k).is_some());
            let _ = (v.as_u64(), v.as_f64(), v.as_str(), v.type_name());
        }
        std::hint::black_box(sum);
    }
});
