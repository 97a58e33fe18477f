//! Every architecture against an independent float64 forward pass written here, from the
//! GGUF's own tensors (no engine code but the kernels' dequantizer, which the kernels crate
//! tests against hand-built blocks). No real Llama or Qwen checkpoint can be fetched here, so
//! these random-weight models are how GQA, both RoPE styles, QK-norm (per head and whole),
//! Q/K/V biases, Gemma's sliding windows (every 6th or every 2nd layer global), post-norms and
//! Gemma 2's soft-caps, Phi-3's fused tensors, gpt-oss's sinks, biases, YaRN and gating, tied/untied heads and the experts'
//! routing (Qwen3-MoE, OLMoE, a Llama with experts) are checked.

use ferrox_engine::synthetic::{self, build_gguf, SyntheticSpec};
use ferrox_engine::{Arch, Model, ModelConfig, SeqChunk};
use ferrox_gguf::{GgmlType, GgufFile};

struct Ref<'a> {
    f: &'a GgufFile,
    c: ModelConfig,
}

impl Ref<'_> {
    fn t(&self, name: &str) -> Option<Vec<f64>> {
        let info = self.f.tensor(name)?;
        let mut out = vec![0f32; info.n_elems() as usize];
        ferrox_kernels::dequantize_row(info.ty, self.f.tensor_data(info), &mut out);
        Some(out.into_iter().map(f64::from).collect())
    }

    fn w(&self, name: &str) -> Vec<f64> {
        self.t(name).unwrap_or_else(|| panic!("{name}"))
    }

    fn rms(&self, x: &[f64], w: &[f64]) -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let s = 1.0 / (ms + self.c.rms_eps as f64).sqrt();
        x.iter().zip(w).map(|(v, g)| v * s * g).collect()
    }

    /// y = W x for W of `rows` × x.len().
    fn mv(w: &[f64], x: &[f64]) -> Vec<f64> {
        w.chunks_exact(x.len())
            .map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    }

    fn rope(&self, x: &mut [f64], pos: usize, base: f64, scale: f64) {
        // GLM-4 rotates the head's first half only; the rest passes as it is.
        let x = &mut x[..self.c.rope_dim];
        let d = x.len();
        // YaRN (gpt-oss): each pair's angle blends the interpolated (scaled) one and the
        // extrapolated one by a ramp over the pairs, and cos/sin grow by 1 + 0.1 ln(factor).
        let yarn = self.c.yarn.map(|y| {
            let f = self.c.rope_freq_scale as f64;
            let dim = |beta: f64| {
                d as f64 * (y.orig_ctx as f64 / (beta * 2.0 * std::f64::consts::PI)).ln()
                    / (2.0 * base.ln())
            };
            let low = dim(y.beta_fast as f64).floor().max(0.0);
            let high = dim(y.beta_slow as f64).ceil().min(d as f64 - 1.0);
            // The magnitude (1 + 0.1 ln factor, or Mistral 3's ratio) as the config read it.
            (f, low, high, y.mscale as f64)
        });
        // Per-pair factors divide the frequencies: Llama 3.1's, or LongRoPE's long ones past
        // the original context (the file's context is longer), else its short ones.
        let long = self
            .c
            .rope_orig_ctx
            .is_some_and(|o| self.c.context_length > o);
        let factors = self.t("rope_freqs.weight").or_else(|| match long {
            true => self.t("rope_factors_long.weight"),
            false => self.t("rope_factors_short.weight"),
        });
        for i in 0..d / 2 {
            let mut theta = pos as f64 * scale * base.powf(-2.0 * i as f64 / d as f64);
            if let Some(k) = &factors {
                theta /= k[i];
            }
            // LongRoPE's magnitude (1 for everything else without YaRN).
            let mut mag = self.c.rope_attn_factor as f64;
            if let Some((f, low, high, m)) = yarn {
                let ramp = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                theta *= f * (1.0 - ramp) + ramp;
                mag = m;
            }
            // Llama's families pair adjacent dimensions (the converter permuted their Q/K).
            let interleaved = matches!(
                self.c.arch,
                Arch::Llama
                    | Arch::Granite
                    | Arch::GraniteMoe
                    | Arch::SmolLm3
                    | Arch::Glm4
                    | Arch::Mistral3
            );
            let (a, b) = if interleaved {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + d / 2)
            };
            let (x0, x1) = (x[a], x[b]);
            let (cos, sin) = (mag * theta.cos(), mag * theta.sin());
            x[a] = x0 * cos - x1 * sin;
            x[b] = x0 * sin + x1 * cos;
        }
    }

    /// A mixture-of-experts FFN over every position: softmax router, top `n_used` experts
    /// (renormalised where the family does), their SiLU-gated outputs summed by weight.
    fn moe_layer(&self, il: usize, m: &ferrox_engine::config::MoeConfig, xs: &mut [Vec<f64>]) {
        let p = |s: &str| format!("blk.{il}.{s}");
        let d = self.c.n_embd;
        let ff = m.n_ff_exp;
        let router = self.w(&p("ffn_gate_inp.weight"));
        let (ge, ue, de) = (
            self.w(&p("ffn_gate_exps.weight")),
            self.w(&p("ffn_up_exps.weight")),
            self.w(&p("ffn_down_exps.weight")),
        );
        let oss = self.c.arch == Arch::GptOss;
        let norm_name = if oss {
            "post_attention_norm.weight"
        } else {
            "ffn_norm.weight"
        };
        // gpt-oss's biases: the router's, and each expert's after each matrix.
        let bias = |name: &str| self.t(&p(name));
        let (rb, gb, ub, db) = (
            bias("ffn_gate_inp.bias"),
            bias("ffn_gate_exps.bias"),
            bias("ffn_up_exps.bias"),
            bias("ffn_down_exps.bias"),
        );
        let add = |mut y: Vec<f64>, b: &Option<Vec<f64>>, ex: usize| {
            if let Some(b) = b {
                let n = y.len();
                y.iter_mut()
                    .zip(&b[ex * n..(ex + 1) * n])
                    .for_each(|(y, b)| *y += b);
            }
            y
        };
        for x in xs.iter_mut() {
            let h = self.rms(x, &self.w(&p(norm_name)));
            let logits = add(Self::mv(&router, &h), &rb, 0);
            let mx = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = logits.iter().map(|l| (l - mx).exp()).collect();
            let z: f64 = e.iter().sum();
            let mut order: Vec<usize> = (0..e.len()).collect();
            order.sort_by(|&a, &b| e[b].total_cmp(&e[a]));
            let chosen = &order[..m.n_used];
            let total: f64 = chosen.iter().map(|&i| e[i] / z).sum();
            let mut o = vec![0.0; d];
            for &ex in chosen {
                let mut wgt = e[ex] / z;
                if m.norm_weights {
                    wgt /= total;
                }
                if oss {
                    // A softmax over the chosen experts' logits alone.
                    wgt = e[ex] / chosen.iter().map(|&i| e[i]).sum::<f64>();
                }
                let g = add(Self::mv(&ge[ex * ff * d..(ex + 1) * ff * d], &h), &gb, ex);
                let u = add(Self::mv(&ue[ex * ff * d..(ex + 1) * ff * d], &h), &ub, ex);
                let a: Vec<f64> = g
                    .iter()
                    .zip(&u)
                    .map(|(&g, &u)| {
                        if oss {
                            // gpt-oss's SwiGLU, clamped at 7, with alpha 1.702 and up + 1.
                            let (g, u) = (g.min(7.0), u.clamp(-7.0, 7.0));
                            g / (1.0 + (-1.702 * g).exp()) * (u + 1.0)
                        } else {
                            g / (1.0 + (-g).exp()) * u
                        }
                    })
                    .collect();
                let y = add(Self::mv(&de[ex * d * ff..(ex + 1) * d * ff], &a), &db, ex);
                o.iter_mut().zip(&y).for_each(|(o, y)| *o += wgt * y);
            }
            // A shared expert: Qwen 2 MoE's scaled by sigmoid(h · gate_inp), Granite's as is.
            if self.t(&p("ffn_up_shexp.weight")).is_some() {
                let gi = self.t(&p("ffn_gate_inp_shexp.weight"));
                let (gs, us, ds) = (
                    self.w(&p("ffn_gate_shexp.weight")),
                    self.w(&p("ffn_up_shexp.weight")),
                    self.w(&p("ffn_down_shexp.weight")),
                );
                let g = Self::mv(&gs, &h);
                let u = Self::mv(&us, &h);
                let a: Vec<f64> = g
                    .iter()
                    .zip(&u)
                    .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                let y = Self::mv(&ds, &a);
                let gate = match gi {
                    Some(gi) => {
                        let z: f64 = h.iter().zip(&gi).map(|(a, b)| a * b).sum();
                        1.0 / (1.0 + (-z).exp())
                    }
                    None => 1.0,
                };
                o.iter_mut().zip(&y).for_each(|(o, y)| *o += gate * y);
            }
            let k = self.c.residual_scale.unwrap_or(1.0) as f64;
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += k * b);
        }
    }

    /// Logits at the last position of `ids`, recomputing everything.
    fn forward(&self, ids: &[u32]) -> Vec<f64> {
        let c = &self.c;
        let (d, hd) = (c.n_embd, c.head_dim);
        let emb = self.w("token_embd.weight");
        let gemma = c.arch.is_gemma();
        let mut xs: Vec<Vec<f64>> = ids
            .iter()
            .map(|&t| {
                let row = &emb[t as usize * d..(t as usize + 1) * d];
                let k = if gemma {
                    (d as f64).sqrt()
                } else {
                    c.embedding_scale.unwrap_or(1.0) as f64
                };
                row.iter().map(|v| v * k).collect()
            })
            .collect();
        for il in 0..c.n_layer {
            let p = |s: &str| format!("blk.{il}.{s}");
            let sliding = c.sliding_window > 0 && il % c.swa_period != c.swa_period - 1;
            let base = if sliding {
                c.rope_base_swa
            } else {
                c.rope_base
            } as f64;
            let (wq, wk, wv) = match self.t(&p("attn_qkv.weight")) {
                // Fused (Phi-3): Q rows, then K, then V.
                Some(qkv) => {
                    let (q, kv) = (c.n_head * hd * d, c.n_head_kv * hd * d);
                    (
                        qkv[..q].to_vec(),
                        qkv[q..q + kv].to_vec(),
                        qkv[q + kv..].to_vec(),
                    )
                }
                None => (
                    self.w(&p("attn_q.weight")),
                    self.w(&p("attn_k.weight")),
                    self.w(&p("attn_v.weight")),
                ),
            };
            let mut qs = Vec::new();
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            for (pos, x) in xs.iter().enumerate() {
                // OLMo 2 norms no block's input.
                let h = match self.t(&p("attn_norm.weight")) {
                    Some(w) => self.rms(x, &w),
                    None if c.arch == Arch::Olmo2 => x.clone(),
                    None => panic!("layer {il} has no attn_norm"),
                };
                let mut q = Self::mv(&wq, &h);
                let mut k = Self::mv(&wk, &h);
                let mut v = Self::mv(&wv, &h);
                for (y, b) in [
                    (&mut q, "attn_q.bias"),
                    (&mut k, "attn_k.bias"),
                    (&mut v, "attn_v.bias"),
                ] {
                    if let Some(bias) = self.t(&p(b)) {
                        y.iter_mut().zip(bias).for_each(|(a, b)| *a += b);
                    }
                }
                for (y, n) in [
                    (&mut q, "attn_q_norm.weight"),
                    (&mut k, "attn_k_norm.weight"),
                ] {
                    let mut norm = self.t(&p(n));
                    // A norm as wide as the projection (OLMoE) applies to all of it at once.
                    if let Some(w) = norm.take_if(|w| w.len() == y.len() && w.len() != hd) {
                        let normed = self.rms(y, &w);
                        y.copy_from_slice(&normed);
                    }
                    for head in y.chunks_exact_mut(hd) {
                        if let Some(w) = &norm {
                            let normed = self.rms(head, w);
                            head.copy_from_slice(&normed);
                        }
                        // SmolLM 3: every fourth layer has no rotary embedding.
                        if !(c.arch == Arch::SmolLm3 && (il + 1) % 4 == 0) {
                            self.rope(head, pos, base, 1.0);
                        }
                    }
                }
                // Mistral 3's attention temperature, past the original context.
                if let Some((t, period)) = c.attn_temperature {
                    let k = ((pos / period) as f64 + 1.0).ln() * t as f64 + 1.0;
                    q.iter_mut().for_each(|v| *v *= k);
                }
                qs.push(q);
                ks.push(k);
                vs.push(v);
            }
            let group = c.n_head / c.n_head_kv;
            let scale = c.attn_scale as f64;
            let wo = self.w(&p("attn_output.weight"));
            let sinks = self.t(&p("attn_sinks.weight"));
            let bo = self.t(&p("attn_output.bias"));
            let oss = c.arch == Arch::GptOss;
            for qi in 0..xs.len() {
                let mut att = vec![0.0; c.n_head * hd];
                for h in 0..c.n_head {
                    let g = h / group;
                    let q = &qs[qi][h * hd..(h + 1) * hd];
                    let lo = if sliding {
                        (qi + 1).saturating_sub(c.sliding_window)
                    } else {
                        0
                    };
                    let scores: Vec<f64> = (lo..=qi)
                        .map(|j| {
                            q.iter()
                                .zip(&ks[j][g * hd..(g + 1) * hd])
                                .map(|(a, b)| a * b)
                                .sum::<f64>()
                                * scale
                        })
                        .map(|s| match c.attn_softcap {
                            Some(cap) => cap as f64 * (s / cap as f64).tanh(),
                            None => s,
                        })
                        .collect();
                    // gpt-oss's sink: one more logit in the softmax, with no value.
                    let sink = sinks.as_ref().map(|s| s[h]);
                    let m = scores
                        .iter()
                        .copied()
                        .chain(sink)
                        .fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                    let z: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - m).exp());
                    for (j, ej) in (lo..=qi).zip(&e) {
                        for i in 0..hd {
                            att[h * hd + i] += ej / z * vs[j][g * hd + i];
                        }
                    }
                }
                let mut o = Self::mv(&wo, &att);
                if let Some(b) = &bo {
                    o.iter_mut().zip(b).for_each(|(o, b)| *o += b);
                }
                // (gpt-oss's `post_attention_norm` is its pre-FFN norm, not Gemma's post-norm.)
                if let Some(w) = self.t(&p("post_attention_norm.weight")).filter(|_| !oss) {
                    o = self.rms(&o, &w);
                }
                let k = c.residual_scale.unwrap_or(1.0) as f64;
                xs[qi].iter_mut().zip(&o).for_each(|(a, b)| *a += k * b);
            }
            if let Some(m) = &c.moe {
                self.moe_layer(il, m, &mut xs);
                continue;
            }
            let (wg, wu, wd) = match self.t(&p("ffn_gate.weight")) {
                Some(g) => (
                    g,
                    self.w(&p("ffn_up.weight")),
                    self.w(&p("ffn_down.weight")),
                ),
                // Fused gate and up (Phi-3): gate rows first.
                None => {
                    let both = self.w(&p("ffn_up.weight"));
                    let half = both.len() / 2;
                    (
                        both[..half].to_vec(),
                        both[half..].to_vec(),
                        self.w(&p("ffn_down.weight")),
                    )
                }
            };
            for x in xs.iter_mut() {
                let h = match self.t(&p("ffn_norm.weight")) {
                    Some(w) => self.rms(x, &w),
                    None if c.arch == Arch::Olmo2 => x.clone(),
                    None => panic!("layer {il} has no ffn_norm"),
                };
                let g = Self::mv(&wg, &h);
                let u = Self::mv(&wu, &h);
                let a: Vec<f64> = g
                    .iter()
                    .zip(&u)
                    .map(|(&g, &u)| {
                        let act = if gemma {
                            0.5 * g
                                * (1.0
                                    + ((2.0 / std::f64::consts::PI).sqrt()
                                        * (g + 0.044715 * g * g * g))
                                        .tanh())
                        } else {
                            g / (1.0 + (-g).exp())
                        };
                        act * u
                    })
                    .collect();
                let mut o = Self::mv(&wd, &a);
                if let Some(w) = self.t(&p("post_ffw_norm.weight")) {
                    o = self.rms(&o, &w);
                }
                let k = c.residual_scale.unwrap_or(1.0) as f64;
                x.iter_mut().zip(&o).for_each(|(a, b)| *a += k * b);
            }
        }
        let last = self.rms(xs.last().unwrap(), &self.w("output_norm.weight"));
        let head = self.t("output.weight").unwrap_or(emb);
        let logits: Vec<f64> = Self::mv(&head, &last)
            .into_iter()
            .map(|l| l / c.logit_scale.unwrap_or(1.0) as f64)
            .collect();
        match c.final_logit_softcap {
            Some(cap) => logits
                .into_iter()
                .map(|l| cap as f64 * (l / cap as f64).tanh())
                .collect(),
            None => logits,
        }
    }
}

/// Largest |Δ| between engine and reference logits, relative to the reference's spread.
fn compare(spec: &SyntheticSpec, prompt_len: usize) -> f64 {
    let bytes = build_gguf(spec);
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    let r = Ref {
        c: ModelConfig::from_gguf(&file).unwrap(),
        f: &file,
    };
    let model = Model::from_gguf(GgufFile::from_bytes(bytes).unwrap(), 2).unwrap();
    let ids: Vec<u32> = (0..prompt_len).map(|i| (5 + i * 37 % 300) as u32).collect();
    let mut kv = model.new_kv_cache(4, 64);
    let blocks: Vec<u32> = (0..64).collect();
    let got = model
        .forward_multi_seq(
            &mut kv,
            &[SeqChunk {
                tokens: &ids,
                start_pos: 0,
                blocks: &blocks,
                logit_rows: 1,
                want_hidden: false,
            }],
        )
        .unwrap();
    let want = r.forward(&ids);
    // `f64::max` skips a NaN: without this, NaN logits would compare as a perfect match.
    assert!(got.iter().all(|v| v.is_finite()), "non-finite logits");
    let spread = want.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        - want.iter().copied().fold(f64::INFINITY, f64::min);
    let max_diff = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (g as f64 - w).abs())
        .fold(0.0, f64::max);
    max_diff / spread
}

const ARCHES: [Arch; 16] = [
    Arch::Gemma3,
    Arch::GptOss,
    Arch::Granite,
    Arch::GraniteMoe,
    Arch::Gemma2,
    Arch::Phi3,
    Arch::Llama,
    Arch::Qwen2,
    Arch::Qwen3,
    Arch::Qwen3Moe,
    Arch::Qwen2Moe,
    Arch::Olmoe,
    Arch::Olmo2,
    Arch::SmolLm3,
    Arch::Glm4,
    Arch::Mistral3,
];

#[test]
fn f32_weights_track_the_f64_reference() {
    for arch in ARCHES {
        // 20 tokens: past Gemma's 8-token synthetic window, so sliding layers are exercised.
        let rel = compare(&SyntheticSpec::tiny(arch, 7), 20);
        eprintln!("{arch:?} f32 weights: max |Δlogit| / spread = {rel:.2e}");
        // f32 math with an f16 KV cache: errors of order 1e-3 of the logit spread.
        assert!(rel < 5e-3, "{arch:?}: {rel}");
    }
}

/// Frequency factors: Llama 3.1's `rope_freqs.weight`, and Phi-4-mini's rotary setup (RoPE
/// on three quarters of each head, LongRoPE's factors and magnitude).
#[test]
fn rope_factors_track_the_f64_reference() {
    let llama31 = SyntheticSpec {
        rope_freq_factors: true,
        ..SyntheticSpec::tiny(Arch::Llama, 7)
    };
    let phi4_mini = SyntheticSpec {
        long_rope: true,
        ..SyntheticSpec::tiny(Arch::Phi3, 7)
    };
    for spec in [llama31, phi4_mini] {
        let rel = compare(&spec, 20);
        assert!(rel < 5e-3, "{:?}: {rel}", spec.arch);
    }
}

/// Mixtral's layout: a `llama` file with `llama.expert_count` and stacked expert tensors.
#[test]
fn a_llama_with_experts_tracks_the_f64_reference() {
    for (n_expert, n_used) in [(4, 2), (6, 1), (3, 3)] {
        let spec = SyntheticSpec::tiny(Arch::Llama, 5).with_experts(n_expert, n_used, 48);
        let rel = compare(&spec, 20);
        assert!(rel < 5e-3, "{n_expert} experts, {n_used} used: {rel}");
    }
}

#[test]
fn untied_and_tied_heads_both_work() {
    for untied in [false, true] {
        let mut spec = SyntheticSpec::tiny(Arch::Qwen3, 11);
        spec.untied_output = untied;
        let rel = compare(&spec, 9);
        assert!(rel < 5e-3, "untied={untied}: {rel}");
    }
}

#[test]
fn quantized_weights_track_the_f64_reference() {
    for (arch, ty) in [
        (Arch::Llama, GgmlType::Q8_0),
        (Arch::Qwen2, GgmlType::Q4_0),
        (Arch::Qwen3, GgmlType::Q5_0),
        (Arch::Gemma3, GgmlType::Q4_K),
        (Arch::Llama, GgmlType::Q6_K),
        (Arch::Qwen3, GgmlType::F16),
        (Arch::Llama, GgmlType::IQ4_NL),
        (Arch::Qwen3, GgmlType::IQ4_XS),
        (Arch::Gemma3, GgmlType::MXFP4),
        (Arch::Qwen3Moe, GgmlType::Q4_K),
        (Arch::Olmoe, GgmlType::Q8_0),
        (Arch::Gemma2, GgmlType::Q4_K),
        (Arch::Phi3, GgmlType::Q5_K),
        (Arch::Qwen3Moe, GgmlType::IQ3_S),
        (Arch::Llama, GgmlType::IQ2_XS),
        (Arch::Qwen2, GgmlType::IQ1_M),
        (Arch::Gemma3, GgmlType::TQ1_0),
    ] {
        let rel = compare(&SyntheticSpec::tiny(arch, 3).quantized(ty), 12);
        eprintln!("{arch:?} {ty:?}: max |Δlogit| / spread = {rel:.2e}");
        // int8 activations (as llama.cpp) cost about 1 % of the spread on random weights.
        assert!(rel < 3e-2, "{arch:?} {ty:?}: {rel}");
    }
}

/// OLMo 3 is `olmo2` with sliding-window layers, which nothing here computes: refused by
/// its key, never run as OLMo 2.
#[test]
fn olmo3s_sliding_window_is_refused_by_key() {
    let spec = SyntheticSpec {
        sliding_window: 8,
        ..SyntheticSpec::tiny(Arch::Olmo2, 7)
    };
    let err = synthetic::load(&spec, 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("olmo2.attention.sliding_window") && err.contains("OLMo 3"),
        "{err}"
    );
    assert!(synthetic::load(&SyntheticSpec::tiny(Arch::Olmo2, 7), 1).is_ok());
}
