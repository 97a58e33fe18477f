//! Compiling what a request constrains its output to — a JSON schema, "any JSON object", a
//! Lark grammar, a regex — into the scheduler's per-row [`Constraint`], with llguidance.
//!
//! Why llguidance: the engine vLLM, SGLang, llama.cpp and mistral.rs use (MIT); an Earley
//! parser with a lexer, so JSON Schema, Lark-style grammars and regexes all become one kind of
//! grammar; masks over a 262k vocabulary in well under a millisecond; and it refuses schema
//! keywords it cannot enforce instead of ignoring them — it fails closed, which is what we
//! promise. A home-made JSON state machine would need the same years of edge cases; outlines'
//! precompiled FSMs blow up on large schemas; XGrammar has no Rust crate.
//!
//! The tokenizer side: [`Grammars`] builds llguidance's token trie once per model — on a
//! background thread as soon as the model loads ([`Grammars::warm`]), or by the first
//! constrained request if that comes sooner (~1.2 s for a 262k vocabulary): every token's exact bytes,
//! control tokens marked special (prefixed with 0xFF) so that no grammar text can ever match
//! them, and the model's EOS as the grammar's end. A compiled grammar is a `Matcher`; each
//! row deep-clones it, so the `n` choices of a request each parse their own output.
//!
//! Fail closed: a schema, grammar or regex that does not compile is an
//! [`ApiError::InvalidParameter`] naming the parameter and llguidance's reason, before
//! anything is generated.

use std::sync::{Arc, OnceLock};

use ferrox_engine::Model;
use ferrox_sched::{Constraint, ConstraintFactory, TokenConstraint};
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::core::error::ApiError;
use crate::core::schema_rules;

/// What a request constrains its output to.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// JSON valid against this schema.
    JsonSchema(Value),
    /// A grammar in llguidance's Lark syntax.
    Lark(String),
    /// Text matching this regex, whole.
    Regex(String),
}

/// A constraint request: the spec and the parameter it came in (for errors).
#[derive(Debug, Clone, PartialEq)]
pub struct GrammarRequest {
    pub spec: GrammarSpec,
    pub param: String,
}

impl GrammarRequest {
    /// The JSON schema of a structured answer asked for beside tools: a grammar or a regex
    /// cannot be one (a tool grammar holds the answer as JSON).
    pub fn structured(&self) -> Result<Value, ApiError> {
        match &self.spec {
            GrammarSpec::JsonObject => Ok(serde_json::json!({"type": "object"})),
            GrammarSpec::JsonSchema(schema) => Ok(schema.clone()),
            GrammarSpec::Lark(_) | GrammarSpec::Regex(_) => Err(ApiError::invalid(
                self.param.clone(),
                "a grammar cannot be combined with tools (a JSON schema can)",
            )),
        }
    }
}

/// The compiler for one model, its token trie built on first use. Clones share the trie.
#[derive(Clone)]
pub struct Grammars {
    model: Arc<Model>,
    factory: Arc<OnceLock<Result<ParserFactory, String>>>,
}

impl Grammars {
    pub fn new(model: Arc<Model>) -> Self {
        Grammars {
            model,
            factory: Arc::new(OnceLock::new()),
        }
    }

    /// Builds the token trie now (blocking, ~1.2 s for a 262k vocabulary), so that the first
    /// constrained request does not pay for it; `ferrox serve` calls it on a background
    /// thread once a model is loaded (`models/registry.rs`). A failure is reported by the first compile.
    pub fn warm(&self) {
        let _ = self.factory();
    }

    fn factory(&self) -> Result<&ParserFactory, ApiError> {
        self.factory
            .get_or_init(|| {
                let env: TokEnv = Arc::new(TokenizerView::new(Arc::clone(&self.model)));
                let mut f = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
                f.quiet();
                Ok(f)
            })
            .as_ref()
            .map_err(|e| ApiError::Internal {
                message: format!("the grammar engine could not start: {e}"),
            })
    }

    /// Compiles `request` (blocking: a large schema takes milliseconds).
    pub fn compile(&self, request: &GrammarRequest) -> Result<Constraint, ApiError> {
        let grammar = match &request.spec {
            GrammarSpec::JsonObject => TopLevelGrammar::from_json_schema(with_layout(
                serde_json::json!({"type": "object"}),
            )),
            GrammarSpec::JsonSchema(schema) => {
                TopLevelGrammar::from_json_schema(with_layout(schema.clone()))
            }
            GrammarSpec::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            GrammarSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
        };
        let parser = self.factory()?.create_parser(grammar).map_err(|e| {
            ApiError::invalid(request.param.clone(), format!("cannot be enforced: {e}"))
        })?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ApiError::invalid(
                request.param.clone(),
                format!("cannot be enforced: {e}"),
            ));
        }
        Ok(Constraint(Arc::new(Compiled(matcher))))
    }
}

/// The JSON layout: one line, `", "` between items and `": "` after keys, no other
/// whitespace (a schema's own `x-guidance` options win). Free whitespace would let a small
/// model pad its output with newlines until the budget runs out, a known failure of
/// whitespace-flexible JSON grammars. And llama.cpp's rules for what a schema leaves open
/// (`core/schema_rules.rs`).
pub(crate) fn with_layout(mut schema: Value) -> Value {
    schema_rules::apply(&mut schema);
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}

/// A compiled grammar; each row starts from a deep copy.
struct Compiled(Matcher);

impl ConstraintFactory for Compiled {
    fn start(&self) -> Box<dyn TokenConstraint> {
        Box::new(RowMatcher(self.0.deep_clone()))
    }
}

struct RowMatcher(Matcher);

impl TokenConstraint for RowMatcher {
    fn allowed(&mut self, allowed: &mut [u32]) -> Result<(), String> {
        let mask = self.0.compute_mask_or_eos().map_err(|e| e.to_string())?;
        for (out, w) in allowed.iter_mut().zip(mask.as_slice()) {
            *out = *w;
        }
        Ok(())
    }

    fn advance(&mut self, token: u32) -> Result<bool, String> {
        if self.0.is_stopped() {
            // Only EOS was allowed: it ends the row.
            return Ok(true);
        }
        self.0.consume_token(token).map_err(|e| e.to_string())?;
        Ok(self.0.is_stopped())
    }
}

/// llguidance's view of our tokenizer: the trie of every token's bytes, and tokenizing.
struct TokenizerView {
    model: Arc<Model>,
    trie: TokTrie,
}

impl TokenizerView {
    fn new(model: Arc<Model>) -> Self {
        let tok = model.tokenizer();
        let n = tok.vocab_size();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                if tok.is_control(id) {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tok.token_bytes_special(id));
                    w
                } else {
                    tok.token_bytes(id).to_vec()
                }
            })
            .collect();
        let eos = tok.eos().or(tok.eot()).unwrap_or(0);
        let info = TokRxInfo {
            tok_bos: tok.bos(),
            tok_pad: tok.pad(),
            tok_unk: tok.unk(),
            tok_end_of_turn: tok.eot(),
            ..TokRxInfo::new(n as u32, eos)
        };
        let trie = TokTrie::from(&info, &words);
        TokenizerView { model, trie }
    }
}

impl TokenizerEnv for TokenizerView {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Our tokenizer's ids when they spell `s` exactly; otherwise (bytes that are not UTF-8,
    /// or a SentencePiece vocabulary that spells a space through byte tokens of `▁`) the
    /// trie's greedy tokenization, which always does: llguidance needs tokens whose bytes are
    /// the bytes it asked for.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        let tok = self.model.tokenizer();
        if let Ok(text) = std::str::from_utf8(s) {
            let ids = tok.encode(text, false, false);
            let mut spelled = Vec::with_capacity(s.len());
            for &id in &ids {
                spelled.extend_from_slice(tok.token_bytes(id));
            }
            if spelled == s {
                return ids;
            }
        }
        self.trie.greedy_tokenize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrox_engine::synthetic::{self, SyntheticSpec};
    use ferrox_engine::Arch;
    /// The synthetic vocabulary has no `▁` token, so SentencePiece spells a lone space with
    /// the byte tokens of `▁`: llguidance must get tokens that spell a space instead.
    #[test]
    fn forced_text_is_tokenized_into_tokens_that_spell_it() {
        let model = Arc::new(synthetic::load(&SyntheticSpec::tiny(Arch::Gemma3, 7), 1).unwrap());
        let view = TokenizerView::new(Arc::clone(&model));
        for text in [" ", "{\"a\": 1}", " w7 x", "\u{e9}t\u{e9}"] {
            let ids = view.tokenize_bytes(text.as_bytes());
            assert_eq!(view.trie.decode(&ids), text.as_bytes(), "{text:?}: {ids:?}");
        }
    }
}
