//! Opens the real default model (gemma-3-270m, Q4_K_M) to check the reader against a file
//! written by llama.cpp's converter rather than by our own writer.
//!
//! The model path is `$FERROX_MODEL`, else `$HOME/.cache/ferrox/models/gemma-3-270m-q4_k_m.gguf`.
//! When the file is absent the test passes with a note, unless `FERROX_REQUIRE_MODEL=1`, which
//! turns absence into a failure (set it on machines that are meant to have the model).

use std::path::PathBuf;

use ferrox_gguf::{GgmlType, GgufFile};

fn model_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FERROX_MODEL") {
        return Some(PathBuf::from(p));
    }
    Some(ferrox_engine::cache::default_model_path())
}

#[test]
fn reads_the_default_gemma3_model() {
    let required = std::env::var("FERROX_REQUIRE_MODEL").is_ok_and(|v| v == "1");
    let path = match model_path() {
        Some(p) if p.exists() => p,
        other => {
            let msg =
                format!("model {other:?} not found: run the model fetch (or set FERROX_MODEL)");
            assert!(!required, "{msg}");
            eprintln!("skipping: {msg}");
            return;
        }
    };
    let f = GgufFile::open(&path).unwrap();
    assert!(f.is_mapped());
    assert_eq!(f.version(), 3);
    assert_eq!(f.get_str("general.architecture").unwrap(), "gemma3");
    assert_eq!(f.get_u64("gemma3.block_count").unwrap(), 18);
    assert_eq!(f.get_u64("gemma3.embedding_length").unwrap(), 640);
    assert_eq!(f.get_array("tokenizer.ggml.tokens").unwrap().len(), 262144);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.tensors().len(), 236);

    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.ty, GgmlType::Q8_0);
    assert_eq!(embd.dims, vec![640, 262144]);
    assert_eq!((embd.cols(), embd.rows()), (640, 262144));
    assert_eq!(f.tensor_data(embd).len() as u64, 262144 * 640 / 32 * 34);

    // Every tensor lies inside the file; the last one ends near its end.
    let end = f
        .tensors()
        .iter()
        .map(|t| f.data_offset() + t.offset + t.n_bytes)
        .max()
        .unwrap();
    assert!(end <= f.file_size() && f.file_size() - end < f.alignment());
}
