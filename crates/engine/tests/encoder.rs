//! The BERT-family encoder against an independent float64 forward written here from the
//! GGUF's own tensors, on random-weight encoders the project writes (no BERT checkpoint can
//! be fetched here); batched against alone; the steps it refuses; and WordPiece against
//! hand-checked cases.

use ferrox_engine::synthetic::{build_gguf, SyntheticSpec, BERT_PIECES};
use ferrox_engine::tokenizer::{Tokenizer, VocabMetadata};
use ferrox_engine::{Arch, Model, SeqChunk};
use ferrox_gguf::{GgmlType, GgufFile};

fn spec(seed: u64) -> SyntheticSpec {
    SyntheticSpec {
        context_length: 64,
        ..SyntheticSpec::tiny(Arch::Bert, seed)
    }
}

/// The float64 encoder: every formula spelled out again, nothing shared with the engine but
/// the dequantizer.
struct Ref {
    f: GgufFile,
    d: usize,
    heads: usize,
    layers: usize,
}

impl Ref {
    fn w(&self, name: &str) -> Vec<f64> {
        let info = self.f.tensor(name).unwrap_or_else(|| panic!("{name}"));
        let mut out = vec![0f32; info.n_elems() as usize];
        ferrox_kernels::dequantize_row(info.ty, self.f.tensor_data(info), &mut out);
        out.into_iter().map(f64::from).collect()
    }

    fn row(&self, name: &str, i: usize) -> Vec<f64> {
        self.w(name)[i * self.d..(i + 1) * self.d].to_vec()
    }

    fn ln(&self, x: &[f64], name: &str) -> Vec<f64> {
        let (w, b) = (
            self.w(&format!("{name}.weight")),
            self.w(&format!("{name}.bias")),
        );
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        x.iter()
            .zip(w.iter().zip(&b))
            .map(|(v, (w, b))| (v - mean) / (var + 1e-12).sqrt() * w + b)
            .collect()
    }

    /// W x + b for the tensor pair `name`.
    fn lin(&self, name: &str, x: &[f64]) -> Vec<f64> {
        let (w, b) = (
            self.w(&format!("{name}.weight")),
            self.w(&format!("{name}.bias")),
        );
        w.chunks_exact(x.len())
            .zip(&b)
            .map(|(r, b)| r.iter().zip(x).map(|(a, c)| a * c).sum::<f64>() + b)
            .collect()
    }

    fn forward(&self, ids: &[u32]) -> Vec<Vec<f64>> {
        let (d, hd) = (self.d, self.d / self.heads);
        let mut x: Vec<Vec<f64>> = ids
            .iter()
            .enumerate()
            .map(|(pos, &t)| {
                let (e, p, ty) = (
                    self.row("token_embd.weight", t as usize),
                    self.row("position_embd.weight", pos),
                    self.row("token_types.weight", 0),
                );
                let sum: Vec<f64> = (0..d).map(|i| e[i] + p[i] + ty[i]).collect();
                self.ln(&sum, "token_embd_norm")
            })
            .collect();
        for il in 0..self.layers {
            let p = |s: &str| format!("blk.{il}.{s}");
            let q: Vec<_> = x.iter().map(|r| self.lin(&p("attn_q"), r)).collect();
            let k: Vec<_> = x.iter().map(|r| self.lin(&p("attn_k"), r)).collect();
            let v: Vec<_> = x.iter().map(|r| self.lin(&p("attn_v"), r)).collect();
            let mut next = Vec::new();
            for i in 0..x.len() {
                let mut att = vec![0.0; d];
                for h in 0..self.heads {
                    let hs = h * hd..(h + 1) * hd;
                    let scores: Vec<f64> = (0..x.len())
                        .map(|j| {
                            let dot: f64 = q[i][hs.clone()]
                                .iter()
                                .zip(&k[j][hs.clone()])
                                .map(|(a, b)| a * b)
                                .sum();
                            dot / (hd as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = e.iter().sum();
                    for (j, ej) in e.iter().enumerate() {
                        for c in hs.clone() {
                            att[c] += ej / total * v[j][c];
                        }
                    }
                }
                let o = self.lin(&p("attn_output"), &att);
                let h: Vec<f64> = o.iter().zip(&x[i]).map(|(a, b)| a + b).collect();
                let h = self.ln(&h, &p("attn_output_norm"));
                let up: Vec<f64> = self
                    .lin(&p("ffn_up"), &h)
                    .into_iter()
                    .map(|u| {
                        let c = (2.0 / std::f64::consts::PI).sqrt();
                        0.5 * u * (1.0 + (c * (u + 0.044715 * u.powi(3))).tanh())
                    })
                    .collect();
                let down = self.lin(&p("ffn_down"), &up);
                let out: Vec<f64> = down.iter().zip(&h).map(|(a, b)| a + b).collect();
                next.push(self.ln(&out, &p("layer_output_norm")));
            }
            x = next;
        }
        x
    }
}

/// The engine's rows of each sequence of `seqs`, all in one step.
fn encode(model: &Model, seqs: &[&[u32]]) -> Vec<f32> {
    let mut kv = model.new_kv_cache(16, 16);
    let tables: Vec<Vec<u32>> = (0..seqs.len())
        .map(|i| (4 * i as u32..4 * i as u32 + 4).collect())
        .collect();
    let chunks: Vec<SeqChunk> = seqs
        .iter()
        .zip(&tables)
        .map(|(tokens, blocks)| SeqChunk {
            tokens,
            start_pos: 0,
            blocks,
            logit_rows: 0,
            want_hidden: true,
        })
        .collect();
    let (mut logits, mut hidden) = (Vec::new(), Vec::new());
    model
        .forward_multi_seq_hidden_into(&mut kv, &chunks, &mut logits, &mut hidden)
        .unwrap();
    assert!(logits.is_empty());
    hidden
}

#[test]
fn the_encoder_matches_a_float64_forward() {
    for seed in [1, 2, 3] {
        let bytes = build_gguf(&spec(seed));
        let model = Model::from_gguf(GgufFile::from_bytes(bytes.clone()).unwrap(), 2).unwrap();
        let cfg = model.config().clone();
        assert!(!cfg.causal && cfg.arch.is_encoder());
        let reference = Ref {
            f: GgufFile::from_bytes(bytes).unwrap(),
            d: cfg.n_embd,
            heads: cfg.n_head,
            layers: cfg.n_layer,
        };
        let ids: Vec<u32> = (0..40).map(|i| (i * 37 + seed as u32 * 11) % 300).collect();
        let got = encode(&model, &[&ids]);
        let want = reference.forward(&ids);
        assert_eq!(got.len(), ids.len() * cfg.n_embd);
        let mut worst = 0.0f64;
        for (g, w) in got.chunks_exact(cfg.n_embd).zip(&want) {
            for (a, b) in g.iter().zip(w) {
                let diff = (f64::from(*a) - b).abs();
                // Written so that a NaN fails too. LayerNorm keeps every value near unit
                // scale: f32 rounding stays far below this.
                assert!(diff < 2e-4, "seed {seed}: {a} against {b}");
                worst = worst.max(diff);
            }
        }
        assert!(
            worst > 0.0,
            "an f32 forward equal to an f64 one to the last bit"
        );
    }
}

#[test]
fn a_batched_sequence_equals_itself_alone_and_attends_both_ways() {
    let model = Model::from_gguf(GgufFile::from_bytes(build_gguf(&spec(4))).unwrap(), 2).unwrap();
    let d = model.config().n_embd;
    let a: Vec<u32> = (10..30).collect();
    let b: Vec<u32> = (50..57).collect();
    let alone_a = encode(&model, &[&a]);
    let alone_b = encode(&model, &[&b]);
    let both = encode(&model, &[&a, &b]);
    assert_eq!(both[..a.len() * d], alone_a[..]);
    assert_eq!(both[a.len() * d..], alone_b[..]);
    // Bidirectional: the first token's row depends on the last token.
    let mut changed = a.clone();
    *changed.last_mut().unwrap() += 1;
    assert_ne!(encode(&model, &[&changed])[..d], alone_a[..d]);
}

#[test]
fn an_encoder_step_must_be_whole_sequences_without_logits() {
    let model = Model::from_gguf(GgufFile::from_bytes(build_gguf(&spec(5))).unwrap(), 1).unwrap();
    let mut kv = model.new_kv_cache(16, 4);
    let tokens = [5u32, 6, 7];
    for (start_pos, logit_rows) in [(1, 0), (0, 1)] {
        let chunk = SeqChunk {
            tokens: &tokens,
            start_pos,
            blocks: &[0],
            logit_rows,
            want_hidden: true,
        };
        let (mut l, mut h) = (Vec::new(), Vec::new());
        let e = model
            .forward_multi_seq_hidden_into(&mut kv, &[chunk], &mut l, &mut h)
            .unwrap_err();
        assert!(e.to_string().starts_with("an encoder"), "{e}");
    }
    // A quantized encoder loads and runs too.
    let q = SyntheticSpec {
        weight_type: GgmlType::Q8_0,
        ..spec(6)
    };
    let model = Model::from_gguf(GgufFile::from_bytes(build_gguf(&q)).unwrap(), 1).unwrap();
    assert!(encode(&model, &[&[2, 5, 3]]).iter().all(|v| v.is_finite()));
}

fn wordpiece() -> Tokenizer {
    let tokens: Vec<String> = BERT_PIECES.iter().map(|t| t.to_string()).collect();
    let types = (0..tokens.len())
        .map(|i| if i < 5 { 3 } else { 1 })
        .collect();
    Tokenizer::from_metadata(VocabMetadata {
        model: "bert".into(),
        tokens,
        token_types: Some(types),
        unknown_id: Some(1),
        bos_id: Some(2),
        separator_id: Some(3),
        ..Default::default()
    })
    .unwrap()
}

fn pieces(tok: &Tokenizer, text: &str) -> Vec<String> {
    tok.encode(text, false, false)
        .iter()
        .map(|&id| tok.token_to_piece(id).replace('\u{2581}', "_"))
        .collect()
}

/// Each case worked out by hand from the rules in `tokenizer/wpm.rs` and the vocabulary of
/// `BERT_PIECES`.
#[test]
fn wordpiece_splits_as_worked_out_by_hand() {
    let tok = wordpiece();
    let cases: &[(&str, &[&str])] = &[
        ("hello world", &["_hello", "_world"]),
        // Lowercased; punctuation is a word of its own.
        ("Hello, WORLD!", &["_hello", "_,", "_world", "_!"]),
        // Longest match first, continuation pieces after a word-start piece.
        ("playing", &["_play", "ing"]),
        ("unaffable", &["_un", "aff", "able"]),
        ("cats sat.", &["_cat", "s", "_sat", "_."]),
        // A word any part of which no piece matches is one [UNK], whatever matched before.
        ("played", &["_play", "ed"]),
        ("playx", &["[UNK]"]),
        ("zzz hello", &["[UNK]", "_hello"]),
        // Accents stripped, whitespace of every kind ends a word, controls dropped.
        ("Héllo\u{3000}wörld\u{7}", &["_hello", "_world"]),
        // CJK ideographs one at a time, even with no space between them.
        ("中文", &["_中", "_文"]),
        ("", &[]),
    ];
    for (text, want) in cases {
        assert_eq!(pieces(&tok, text), *want, "{text:?}");
    }
    // With special tokens: [CLS] first, [SEP] last.
    assert_eq!(tok.encode_special("hello", false), [2, 5, 3]);
    // Decoding puts the word spaces back.
    assert_eq!(
        tok.decode(&tok.encode("hello world", false, false)).trim(),
        "hello world"
    );
}

/// A cross-encoder's score (rank pooling): the classification head over the CLS row,
/// `cls.output · tanh(cls · h + b) + b'`, against the float64 forward and head.
#[test]
fn a_reranker_head_matches_a_float64_score() {
    for seed in [4, 5] {
        let spec = SyntheticSpec {
            pooling_type: Some(4),
            ..spec(seed)
        };
        let bytes = build_gguf(&spec);
        let model = Model::from_gguf(GgufFile::from_bytes(bytes.clone()).unwrap(), 2).unwrap();
        let cfg = model.config().clone();
        let reference = Ref {
            f: GgufFile::from_bytes(bytes).unwrap(),
            d: cfg.n_embd,
            heads: cfg.n_head,
            layers: cfg.n_layer,
        };
        let ids: Vec<u32> = [2]
            .into_iter()
            .chain((0..20).map(|i| 5 + i * 7 % 17))
            .collect();
        let rows = encode(&model, &[&ids]);
        let got = model.classify(&rows[..cfg.n_embd]).expect("a head");
        let cls = &reference.forward(&ids)[0];
        let dense: Vec<f64> = reference
            .lin("cls", cls)
            .into_iter()
            .map(f64::tanh)
            .collect();
        let want = reference.lin("cls.output", &dense);
        assert_eq!(got.len(), 1);
        assert!(
            (f64::from(got[0]) - want[0]).abs() < 1e-4,
            "seed {seed}: {} against {}",
            got[0],
            want[0]
        );
    }
    // A model without a head scores nothing.
    let plain = Model::from_gguf(GgufFile::from_bytes(build_gguf(&spec(1))).unwrap(), 1).unwrap();
    assert!(plain.classify(&vec![0.0; plain.config().n_embd]).is_none());
}
