//! Incremental detokenization for streaming responses.
//!
//! One character can span several tokens (Gemma spells a rare emoji as four `<0xNN>` byte
//! tokens), so a token's bytes cannot always be turned into text on their own. The decoder
//! keeps the undecided tail of the byte stream and emits only complete characters; bytes that
//! can never start a valid character are emitted as U+FFFD at once, so one bad byte does not
//! hold back the stream.

use super::Tokenizer;

/// Turns token ids into text a complete UTF-8 character at a time.
///
/// Concatenating every `push` and the final `finish` gives exactly
/// `String::from_utf8_lossy` of all the tokens' bytes, i.e. [`Tokenizer::decode`].
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    /// Render control tokens as their text (see [`Tokenizer::token_bytes_special`]).
    render_special: bool,
    /// Bytes of an incomplete character at the end of the stream (at most 3).
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder that skips control tokens, like [`Tokenizer::decode`].
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        StreamDecoder {
            tokenizer,
            render_special: false,
            pending: Vec::new(),
        }
    }

    /// A decoder that renders control tokens as their text (`<end_of_turn>` etc.).
    pub fn with_special(tokenizer: &'a Tokenizer) -> Self {
        StreamDecoder {
            tokenizer,
            render_special: true,
            pending: Vec::new(),
        }
    }

    /// Add one token; returns the text that became complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        let bytes = if self.render_special {
            self.tokenizer.token_bytes_special(id)
        } else {
            self.tokenizer.token_bytes(id)
        };
        self.push_bytes(bytes)
    }

    /// Add raw bytes; returns the text that became complete (possibly empty).
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("checked by valid_up_to"));
                    match e.error_len() {
                        // Invalid bytes: they can never become a character.
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                        // A truncated character at the end: wait for more bytes.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Flush what is left (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Whether bytes of an incomplete character are waiting.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}
