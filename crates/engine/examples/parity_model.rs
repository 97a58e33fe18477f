//! Writes one of the llama.cpp parity models (`SyntheticSpec::parity_models`) to a file and
//! prints its fingerprint; `scripts/gen-parity-goldens.sh` runs llama.cpp on it.
//!
//!     cargo run --release -p ferrox-engine --example parity_model -- NAME OUT.gguf

use ferrox_engine::synthetic::{build_gguf, fingerprint, SyntheticSpec};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, out] = args.as_slice() else {
        eprintln!("usage: parity_model NAME OUT.gguf");
        std::process::exit(2);
    };
    let mut models = SyntheticSpec::parity_models();
    models.push(("bert-reranker", SyntheticSpec::reranker()));
    let Some((_, spec)) = models.iter().find(|(n, _)| n == name) else {
        let names: Vec<&str> = models.iter().map(|(n, _)| *n).collect();
        eprintln!("unknown model {name}; one of {names:?}");
        std::process::exit(2);
    };
    let bytes = build_gguf(spec);
    std::fs::write(out, &bytes).expect("writing the model");
    println!("{}", fingerprint(&bytes));
}
