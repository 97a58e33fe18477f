//! Every input that ever crashed or hung the parser (found by the `gguf_parse` fuzz target or in
//! the wild) is kept in `tests/regressions/` and must now parse to `Ok` or a typed error.

use std::path::Path;

use ferrox_gguf::GgufFile;

#[test]
fn regression_inputs_do_not_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        if let Ok(f) = GgufFile::from_bytes(bytes) {
            for t in f.tensors() {
                assert_eq!(
                    f.tensor_data(t).len() as u64,
                    t.n_bytes,
                    "{}",
                    path.display()
                );
            }
        }
        n += 1;
    }
    // A folder read wrong (or emptied) must not pass as "nothing panicked".
    assert!(n >= 1, "no regression input found in {}", dir.display());
    eprintln!("{n} regression inputs checked");
}
