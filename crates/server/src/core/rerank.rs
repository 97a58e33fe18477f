//! Reranking: how well each document answers a query, by a cross-encoder (a BERT-family
//! GGUF whose pooling is `rank`, with a classification head), as llama-server's `--reranking`
//! computes it.
//!
//! Each (query, document) pair is one input, laid out as llama.cpp lays it out without a
//! rerank template: `[BOS] query [EOS] document` (for a BERT vocabulary `[CLS] q [SEP] d`,
//! BOS and EOS as the vocabulary's flags say). The pairs run as prefill-only rows on the one
//! decode path, pooled at their first token like embeddings (`core/embed.rs`), and the
//! engine's classification head turns that row into the score (`Model::classify`; its first
//! label). Scores are the head's raw output, as llama-server returns them.

use std::sync::Arc;

use ferrox_sched::Pooling;

use crate::core::embed::pool_rows;
use crate::core::error::ApiError;
use crate::core::served::ServedModel;

/// One document's score and the tokens its pair took.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub score: f32,
    pub tokens: usize,
}

/// Scores every document against `query`, in order.
pub async fn rerank(
    g: &Arc<ServedModel>,
    query: &str,
    documents: &[String],
) -> Result<Vec<Score>, ApiError> {
    if !g.model.has_classifier() {
        return Err(ApiError::invalid(
            "model",
            format!(
                "`{}` is not a reranker: it has no classification head (`cls.output`); serve a \
                 cross-encoder GGUF whose pooling is `rank`",
                g.model_id
            ),
        ));
    }
    let tok = g.model.tokenizer();
    let q = tok.encode(query, false, true);
    let pairs: Vec<Vec<u32>> = documents
        .iter()
        .map(|doc| {
            let mut ids = Vec::new();
            if let (true, Some(bos)) = (tok.add_bos_default(), tok.bos()) {
                ids.push(bos);
            }
            ids.extend_from_slice(&q);
            if let (true, Some(eos)) = (tok.add_eos_default(), tok.eos()) {
                ids.push(eos);
            }
            ids.extend(tok.encode(doc, false, true));
            ids
        })
        .collect();
    let pooled = pool_rows(g, pairs, Pooling::Cls).await?;
    pooled
        .into_iter()
        .map(|(row, tokens)| {
            let labels = g.model.classify(&row).unwrap_or_default();
            let score = *labels.first().ok_or_else(|| ApiError::Internal {
                message: "the classification head gave no score".into(),
            })?;
            Ok(Score { score, tokens })
        })
        .collect()
}
