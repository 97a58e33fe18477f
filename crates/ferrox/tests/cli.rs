//! The `ferrox` commands a user runs first — `inspect`, `tokenize`, `run`, `bench` — as a
//! user runs them (the built binary, its stdout), on the default model, checked against
//! llama.cpp's reference data in `../shared/golden/gemma3-270m/` wherever it has an answer.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn golden(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/golden/gemma3-270m")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Runs `ferrox ARGS` and returns its stdout; panics with its stderr if it fails.
fn ferrox(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("ferrox starts");
    assert!(
        out.status.success(),
        "ferrox {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn model() -> Option<String> {
    ferrox_engine::cache::model_for_tests().map(|p| p.display().to_string())
}

#[test]
fn inspect_reports_the_models_shape() {
    let Some(m) = model() else { return };
    let out = ferrox(&["inspect", &m]);
    // The figures of the golden README's model table.
    for line in [
        "architecture:    gemma3",
        "layers 18 | embd 640 | heads 4 (kv 1) x 256 | ffn 2048 | vocab 262144",
        "sliding window:  512 (every 6th layer global)",
    ] {
        assert!(out.contains(line), "no {line:?} in\n{out}");
    }
    for ty in ["q8_0", "q4_K", "q6_K", "f32"] {
        assert!(out.contains(&format!("{ty:>6}:")), "no {ty} in\n{out}");
    }
}

#[test]
fn tokenize_matches_llama_cpp_on_every_golden_row() {
    let Some(m) = model() else { return };
    let rows = golden("tokenize.jsonl");
    let dir = std::env::temp_dir().join(format!("ferrox-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("tokenize.jsonl");
    let lines: Vec<String> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "text": r["text"], "add_bos": r["add_bos"], "parse_special": r["parse_special"]
            })
            .to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = ferrox(&["tokenize", "-m", &m, "--jsonl", input.to_str().unwrap()]);
    let got: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), rows.len());
    for (i, (g, r)) in got.iter().zip(&rows).enumerate() {
        assert_eq!(g, &r["ids"], "row {i}: {:?}", r["text"]);
    }
    // The one-text form agrees with the JSON-lines form.
    let hello = rows
        .iter()
        .position(|r| r["text"] == "Hello world" && r["add_bos"] == true)
        .expect("a Hello world row");
    let one: Value =
        serde_json::from_str(&ferrox(&["tokenize", "-m", &m, "--text", "Hello world"])).unwrap();
    assert_eq!(one, rows[hello]["ids"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferrox run --temp 0` continues each golden prompt as llama.cpp does, by the golden
/// README's rule for work that changes the engine's numbers: identical until a near-tie
/// (either reference's top-1/top-2 gap < 0.6, `NEAR_TIE` of the engine's golden test).
/// The golden README's near-tie threshold (its section on the gate for numerics changes).
const NEAR_TIE: f64 = 0.6;

#[test]
fn run_greedy_follows_llama_cpp() {
    let Some(m) = model() else { return };
    for row in golden("greedy.jsonl") {
        let prompt = row["prompt"].as_str().unwrap();
        let out = ferrox(&[
            "run", "-m", &m, "-p", prompt, "-n", "32", "--temp", "0", "--json",
        ]);
        let got: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(got["ids_prompt"], row["ids_prompt"], "{prompt:?}");
        let ours: Vec<u64> = serde_json::from_value(got["ids_out"].clone()).unwrap();
        let theirs: Vec<u64> = serde_json::from_value(row["ids_out"].clone()).unwrap();
        assert_eq!(ours.len(), 32, "{prompt:?}");
        if let Some(k) = ours.iter().zip(&theirs).position(|(a, b)| a != b) {
            let gap = |field: &str| row[field][k].as_f64().unwrap_or(f64::INFINITY);
            assert!(
                gap("top1_top2_logprob_gap") < NEAR_TIE || gap("ref_f64_top1_top2_gap") < NEAR_TIE,
                "{prompt:?}: token {k} differs from llama.cpp's without a near-tie"
            );
        } else {
            assert_eq!(got["text_out"], row["text_out"], "{prompt:?}");
        }
    }
}

#[test]
fn bench_reports_every_figure_it_measures() {
    let Some(m) = model() else { return };
    let out = ferrox(&[
        "bench",
        "-m",
        &m,
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "2",
        "--batch",
        "2",
        "--batch-prompt",
        "8",
        "--bandwidth",
        "--json",
    ]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "batch2",
            "decode_bytes",
            "pp16",
            "read_gbps",
            "tg4",
            "tg_weights_read_pct",
            "weights_read_gbps"
        ],
        "{v}"
    );
    // The default model's head is its embedding table, so a token reads every tensor.
    let file = ferrox_gguf::GgufFile::open(&m).unwrap();
    let all: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
    assert_eq!(v["decode_bytes"].as_u64(), Some(all), "{v}");
    for (k, s) in v.as_object().unwrap() {
        if k == "decode_bytes" {
            continue;
        }
        let (min, median, max) = (
            s["min"].as_f64().unwrap(),
            s["median"].as_f64().unwrap(),
            s["max"].as_f64().unwrap(),
        );
        assert!(
            min > 0.0 && min <= median && median <= max && max.is_finite(),
            "{k}: {s}"
        );
    }
}

/// `ferrox serve`'s start-up refusals and warnings, which need no model: it fails on the
/// missing file only after they are decided.
#[test]
fn serve_refuses_half_a_tls_pair_and_warns_about_an_open_bind_without_a_key() {
    let serve = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ferrox"))
            .arg("serve")
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("FERROX_API_KEY")
            .output()
            .expect("ferrox starts");
        assert!(!out.status.success(), "{args:?} must not serve");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = serve(&["--tls-cert", "cert.pem", "-m", "missing.gguf"]);
    assert!(err.contains("--tls-key"), "{err}");
    let err = serve(&[
        "--tls-cert",
        "no-cert.pem",
        "--tls-key",
        "no-key.pem",
        "-m",
        "missing.gguf",
    ]);
    assert!(err.contains("no-cert.pem"), "{err}");
    let err = serve(&["--host", "0.0.0.0", "--port", "0", "-m", "missing.gguf"]);
    assert!(err.contains("without an API key"), "{err}");
    assert!(err.contains("under any Host name"), "{err}");
    let err = serve(&["--port", "0", "-m", "missing.gguf"]);
    assert!(err.contains("Host is a loopback name"), "{err}");
    let err = serve(&[
        "--port",
        "0",
        "--allowed-hosts",
        "ferrox.lan",
        "-m",
        "missing.gguf",
    ]);
    assert!(err.contains("one of ferrox.lan, 127.0.0.1"), "{err}");
    let err = serve(&[
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--api-key",
        "sk-secret-1",
        "-m",
        "missing.gguf",
    ]);
    assert!(!err.contains("without an API key"), "{err}");
    assert!(err.contains("API keys: 1 configured"), "{err}");
    assert!(
        !err.contains("sk-secret-1"),
        "the key must never be logged: {err}"
    );
    // Keys asked for but none given: refuse rather than serve unauthenticated.
    let empty = std::env::temp_dir().join(format!("ferrox-keys-{}", std::process::id()));
    std::fs::write(&empty, "# nothing yet\n\n").unwrap();
    let err = serve(&[
        "--api-key-file",
        empty.to_str().unwrap(),
        "-m",
        "missing.gguf",
    ]);
    assert!(err.contains("gave no key"), "{err}");
    let err = serve(&["--api-key", "", "-m", "missing.gguf"]);
    assert!(err.contains("gave no key"), "{err}");
    let _ = std::fs::remove_file(&empty);
    let err = serve(&[
        "--cors-origins",
        "http://localhost:3000/",
        "-m",
        "missing.gguf",
    ]);
    assert!(err.contains("--cors-origins"), "{err}");
    // Speculation types that contradict the draft model flag, either way (llama-server's
    // `-md` spelling included).
    let err = serve(&[
        "-md",
        "d.gguf",
        "--spec-type",
        "ngram",
        "-m",
        "missing.gguf",
    ]);
    assert!(
        err.contains("--model-draft") && err.contains("Ngram"),
        "{err}"
    );
    let err = serve(&["--spec-type", "draft", "-m", "missing.gguf"]);
    assert!(err.contains("needs --model-draft"), "{err}");
}

/// `ferrox bench model` writes a real shape (here Gemma 3 4B's, cut to two layers) in
/// llama.cpp's Q4_K_M mix with the default model's tokenizer, and the engine runs it.
#[test]
fn bench_model_writes_a_real_shape_in_llama_cpps_mix() {
    if model().is_none() {
        return;
    }
    let path = std::env::temp_dir().join(format!("ferrox-bench-model-{}.gguf", std::process::id()));
    let p = path.to_str().unwrap();
    let out = ferrox(&[
        "bench",
        "model",
        "--shape",
        "gemma3-4b",
        "--layers",
        "2",
        "-o",
        p,
    ]);
    assert_eq!(out.trim(), p, "prints the path");
    let info = ferrox(&["inspect", p]);
    assert!(
        info.contains("layers 2 | embd 2560 | heads 8 (kv 4) x 256 | ffn 10240 | vocab 262144"),
        "{info}"
    );
    // Q6_K: the tied head, and attn_v / ffn_down of layer 1 (use_more_bits of 2 layers);
    // Q4_K the other twelve matrices; norms f32, all ones.
    let count = |ty: &str| {
        info.lines()
            .find(|l| l.trim_start().starts_with(&format!("{ty}:")))
            .and_then(|l| {
                l.split(':')
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .unwrap_or(0)
    };
    assert_eq!(
        (count("q4_K"), count("q6_K"), count("f32")),
        (12, 3, 13),
        "{info}"
    );
    let file = ferrox_gguf::GgufFile::open(&path).unwrap();
    let norm = file
        .tensors()
        .iter()
        .find(|t| t.name == "blk.0.attn_norm.weight")
        .unwrap();
    let ones: Vec<f32> = file
        .tensor_data(norm)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(ones.len() == 2560 && ones.iter().all(|&v| v == 1.0));
    // The default model's tokenizer: the same ids for the same text.
    let default = model().unwrap();
    let ids = |m: &str| ferrox(&["tokenize", "-m", m, "--text", "Hello, world"]);
    assert_eq!(ids(p), ids(&default));
    // And the engine runs it.
    let text = ferrox(&["run", "-m", p, "-p", "Hello", "-n", "3", "--temp", "0"]);
    assert!(text.starts_with("Hello"), "{text:?}");
    let _ = std::fs::remove_file(&path);
}

/// `FERROX_ISA` forces the kernels' instruction set, and one that cannot be had is refused by
/// name before anything runs.
#[test]
fn ferrox_isa_is_honoured_or_refused() {
    let Some(m) = model() else { return };
    let bench = |isa: &str| {
        Command::new(env!("CARGO_BIN_EXE_ferrox"))
            .args(["bench", "-m", &m, "-p", "8", "-n", "2", "-r", "1"])
            .env("FERROX_ISA", isa)
            .output()
            .expect("ferrox starts")
    };
    let out = bench("scalar");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("| isa: scalar"));
    // A name no build has kernels for.
    let out = bench("neon");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("FERROX_ISA=neon"), "{err}");
}

/// Every SIMD spelling this CPU has (`avx2`, `avxvnni`, `avx512`, `amx`) gives the same model output
/// to the bit: greedy ids and the top log-probabilities, printed at full precision, through
/// the lane-major prefill kernels (a prompt of more than sixteen tokens) and the row-major
/// decode. (The scalar kernels agree with them within float reassociation only, in attention
/// and the gates, so they are not in the comparison.)
#[test]
fn every_simd_spelling_gives_the_same_output() {
    let Some(m) = model() else { return };
    let prompt = "The history of the printing press begins in the fifteenth century, when a \
                  goldsmith in Mainz";
    let run = |isa: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_ferrox"))
            .args([
                "run", "-m", &m, "-p", prompt, "-n", "6", "--temp", "0", "--json",
            ])
            .args(["--top-logprobs", "5"])
            .env("FERROX_ISA", isa)
            .output()
            .expect("ferrox starts");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        // A spelling this CPU lacks is refused by name: not comparable here.
        (out.status.success() || !err.contains("this CPU lacks"))
            .then(|| (String::from_utf8_lossy(&out.stdout).to_string(), err))
    };
    let outputs: Vec<(&str, String)> = ["avx2", "avxvnni", "avx512", "amx"]
        .into_iter()
        .filter_map(|isa| {
            run(isa).map(|(out, err)| {
                assert!(out.contains("\"ids_out\""), "FERROX_ISA={isa}: {out} {err}");
                (isa, out)
            })
        })
        .collect();
    for (isa, out) in &outputs[1..] {
        assert_eq!(out, &outputs[0].1, "FERROX_ISA={isa} vs {}", outputs[0].0);
    }
}

/// `ferrox chat MODEL` without a server: it serves the model in its own process and chats
/// with it; a message gets an answer of the budget `/set` gave, and `/bye` leaves with 0.
#[test]
fn chat_serves_the_model_in_process() {
    use std::io::Write;
    let Some(model) = model() else { return };
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .args(["chat", &model, "--verbose", "-t", "2"])
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ferrox starts");
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"/set max_tokens 5\n/set temperature 0\nHello\n/bye\n")
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("chatting with gemma-3-270m"), "{stdout}");
    assert!(
        stdout.contains("eval count:           5 token(s)"),
        "{stdout}"
    );
}
