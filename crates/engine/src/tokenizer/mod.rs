//! Tokenizers (filled in by the tokenizer work item).
