//! Fill-in-the-middle: code completion between a prefix and a suffix, laid out with the
//! model's own FIM tokens as llama-server lays it out — `[BOS] <FIM_PRE> prefix <FIM_SUF>
//! suffix <FIM_MID> prompt`, each extra file's chunk before it as `<FIM_SEP> filename \n
//! text`. llama.cpp's `/infill` and Ollama's `suffix` both come here.

use crate::core::error::ApiError;
use crate::core::request::{Prompt, PromptPiece};
use crate::core::served::ServedModel;

/// What to fill in the middle of.
#[derive(Debug, Clone, PartialEq)]
pub struct Infill {
    pub prefix: String,
    pub suffix: String,
    /// `(filename, text)` chunks of context from other files.
    pub extra: Vec<(String, String)>,
    /// Text after the middle marker (what the cursor's line already holds).
    pub prompt: String,
}

/// Whether the model has the prefix, suffix and middle tokens a layout needs (Ollama's
/// `insert` capability).
pub fn supported(g: &ServedModel) -> bool {
    let fim = g.model.tokenizer().fim();
    fim.pre.is_some() && fim.suf.is_some() && fim.mid.is_some()
}

impl Infill {
    /// The layout with the model's FIM tokens; a model without them gets a 501, as from
    /// llama-server. `extra_param` names the extra chunks' parameter in a refusal.
    pub fn prompt(self, g: &ServedModel, extra_param: &str) -> Result<Prompt, ApiError> {
        let tokenizer = g.model.tokenizer();
        let fim = tokenizer.fim();
        let (Some(pre), Some(suf), Some(mid)) = (fim.pre, fim.suf, fim.mid) else {
            return Err(ApiError::NotImplemented {
                message: "Infill is not supported by this model: it has no fill-in-the-middle \
                          (prefix, suffix, middle) tokens"
                    .into(),
            });
        };
        let mut pieces = Vec::new();
        if let (true, Some(bos)) = (tokenizer.add_bos_default(), tokenizer.bos()) {
            pieces.push(PromptPiece::Token(bos));
        }
        if !self.extra.is_empty() {
            let Some(sep) = fim.sep else {
                return Err(ApiError::invalid(
                    extra_param,
                    "this model has no file-separator token to lay out extra context with",
                ));
            };
            for (filename, text) in self.extra {
                pieces.push(PromptPiece::Token(sep));
                pieces.push(PromptPiece::Text(format!("{filename}\n{text}")));
            }
        }
        pieces.extend([
            PromptPiece::Token(pre),
            PromptPiece::Text(self.prefix),
            PromptPiece::Token(suf),
            PromptPiece::Text(self.suffix),
            PromptPiece::Token(mid),
            PromptPiece::Text(self.prompt),
        ]);
        pieces.retain(|p| !matches!(p, PromptPiece::Text(t) if t.is_empty()));
        Ok(Prompt::Mixed(pieces))
    }
}
