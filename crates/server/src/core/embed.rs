//! The one embedding path: inputs (texts or token ids) in, one L2-normalised vector each
//! out. Each input is one scheduler request with `embedding` set — a prefill-only row that
//! runs in the same steps as generation (docs/SCHEDULER.md) — so embeddings batch with
//! everything else on one decode path; a batched input equals the same input embedded alone,
//! bit for bit, as the scheduler's tests pin.
//!
//! Inputs are tokenized like a completion prompt (BOS as the model's metadata says, special
//! tokens parsed); token-id inputs are taken as given. At most `max_seqs` inputs of a request
//! are in the scheduler at once (they share steps); the next is submitted as the oldest
//! finishes, so a 2,048-input request neither overflows the queue (a 503 it could never get
//! past) nor fills it for everyone else. A refusal drops (and so cancels) those in flight.

use std::collections::VecDeque;
use std::sync::Arc;

use ferrox_sched::{Event, FinishReason, GenerationRequest, RequestStream};

use crate::core::error::ApiError;
use crate::core::generate::prompt_ids;
use crate::core::request::{Input, Prompt};
use crate::core::served::ServedModel;

/// One input's vector and how many tokens it had.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    pub vector: Vec<f32>,
    pub tokens: usize,
}

/// Embeds every input, in order.
pub async fn embed(g: &Arc<ServedModel>, inputs: Vec<Prompt>) -> Result<Vec<Embedding>, ApiError> {
    let Some(pooling) = g.pooling else {
        return Err(ApiError::invalid(
            "model",
            format!(
                "`{}` cannot pool embeddings: it is served as a reranker (its GGUF says \
                 `rank` pooling, or --reranking); start the server with --pooling \
                 mean|cls|last to pool it anyway",
                g.model_id
            ),
        ));
    };
    // Tokenized first, so that the window refills at once when an input finishes and the
    // scheduler always has a full set of rows to pack into its steps.
    let mut all = Vec::with_capacity(inputs.len());
    let tokenizer = g.model.tokenizer();
    for input in inputs {
        let text = matches!(input, Prompt::Text(_));
        let mut ids = prompt_ids(g, Input::Completion(input), None).await?;
        // With special tokens, as llama-server embeds: an encoder's text ends with [SEP].
        if let (true, true, Some(eos)) = (text, tokenizer.add_eos_default(), tokenizer.eos()) {
            if ids.last() != Some(&eos) {
                ids.push(eos);
            }
        }
        all.push(ids);
    }
    let pooled = pool_rows(g, all, pooling).await?;
    Ok(pooled
        .into_iter()
        .map(|(v, tokens)| Embedding {
            vector: normalized(v),
            tokens,
        })
        .collect())
}

/// Each token-id input pooled as `pooling` says, raw (not normalised), with its token count,
/// in order: the scheduler's prefill-only rows, at most `max_seqs` in flight (see the module
/// doc). Shared by embeddings and reranking.
pub(crate) async fn pool_rows(
    g: &Arc<ServedModel>,
    all: Vec<Vec<u32>>,
    pooling: ferrox_sched::Pooling,
) -> Result<Vec<(Vec<f32>, usize)>, ApiError> {
    let window = g.scheduler.limits().max_seqs.max(1);
    let mut in_flight = VecDeque::with_capacity(window);
    let mut out = Vec::with_capacity(all.len());
    for ids in all {
        if in_flight.len() == window {
            out.push(finish(in_flight.pop_front().expect("the window is full")).await?);
        }
        let tokens = ids.len();
        let request = GenerationRequest {
            embedding: Some(pooling),
            ..GenerationRequest::greedy(ids, 1)
        };
        in_flight.push_back((g.scheduler.submit(request)?, tokens));
    }
    for stream in in_flight {
        out.push(finish(stream).await?);
    }
    Ok(out)
}

/// Waits for one submitted input's pooled row.
async fn finish(
    (mut stream, tokens): (RequestStream, usize),
) -> Result<(Vec<f32>, usize), ApiError> {
    let completion = loop {
        match stream.recv().await {
            Some(Event::Done(c)) => break c,
            Some(Event::Token(_)) => continue,
            None => return Err(ferrox_sched::Refusal::WorkerGone.into()),
        }
    };
    let vector = match (completion.finish_reason, completion.embedding) {
        (FinishReason::Stop, Some(v)) => v,
        (FinishReason::Error(message), _) => return Err(ApiError::GenerationFailed { message }),
        (reason, _) => {
            return Err(ApiError::Internal {
                message: format!("an embedding ended without a vector ({reason:?})"),
            })
        }
    };
    Ok((vector, tokens))
}

/// `v / |v|` (a zero vector stays zero).
fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        v.iter_mut()
            .for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_come_out_unit_length() {
        let v = normalized(vec![3.0, 4.0]);
        assert_eq!(v, [0.6, 0.8]);
        assert_eq!(normalized(vec![0.0, 0.0]), [0.0, 0.0]);
    }
}
