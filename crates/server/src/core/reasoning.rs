//! The reasoning split: what a thinking model writes between `<think>` and `</think>` (Qwen
//! 3, DeepSeek-R1 and their distills) is its reasoning, not its answer, and each protocol
//! has a place for it (chat `reasoning_content`, Anthropic `thinking` blocks, Responses
//! `reasoning` items).
//!
//! Whether a model thinks is its chat template's to say: a template that writes `</think>`
//! belongs to a thinking family. Some templates open the block themselves at the end of the
//! prompt (DeepSeek-R1's ends with `<think>\n`); then the answer starts inside it and only
//! `</think>` comes out. Otherwise a block counts only if the answer begins with `<think>`
//! (leading whitespace aside). Text after `</think>` is the answer, its leading whitespace
//! dropped. An answer cut off inside the block (`max_tokens`) is all reasoning.
//!
//! gpt-oss writes the same thing in OpenAI's harmony format: its reasoning is the
//! `analysis` channel, `<|channel|>analysis<|message|>…<|end|>`, and its answer the `final`
//! channel. Harmony answers are messages with headers, calls among them, so they have their
//! own reader (`core/harmony.rs`); this module only tells a harmony template
//! ([`HARMONY`]'s tags) from a `<think>` one ([`THINK`]'s) and splits the latter.
//!
//! The split applies to chat answers without tools or a grammar (a constraint shapes the
//! whole output, so there is no free-form block to split), and `--reasoning-format none`
//! turns it off.

/// How a family marks its reasoning block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tags {
    pub open: &'static str,
    pub close: &'static str,
}

/// Qwen 3's, DeepSeek-R1's and their distills'.
pub const THINK: Tags = Tags {
    open: "<think>",
    close: "</think>",
};

/// gpt-oss's harmony channels (read by `core/harmony.rs`, never by [`Splitter`]).
pub const HARMONY: Tags = Tags {
    open: "<|channel|>analysis<|message|>",
    close: "<|end|>",
};

/// The tags of the thinking family a chat template belongs to, if any: one that writes
/// `</think>`, or harmony's analysis channel (gpt-oss).
pub fn tags_of_template(source: &str) -> Option<Tags> {
    if source.contains(THINK.close) {
        Some(THINK)
    } else if source.contains("<|channel|>") && source.contains("analysis") {
        Some(HARMONY)
    } else {
        None
    }
}

/// How a thinking model's answers begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thinking {
    /// The template's prompt ends inside an open block.
    pub opened_by_prompt: bool,
    pub tags: Tags,
}

/// A whole answer split: its reasoning (`None` if it had no block) and its answer.
pub fn split(text: &str, t: Thinking) -> (Option<String>, String) {
    let mut s = Splitter::new(t);
    let mut parts = s.push(text);
    parts.extend(s.finish());
    let (reasoning, answer) = join(parts);
    (reasoning.or_else(|| s.saw_block.then(String::new)), answer)
}

/// The reasoning (if any piece was) and the answer of `parts`, concatenated.
fn join(parts: Vec<Part>) -> (Option<String>, String) {
    let (mut reasoning, mut answer) = (None::<String>, String::new());
    for p in parts {
        match p {
            Part::Reasoning(r) => reasoning.get_or_insert_with(String::new).push_str(&r),
            Part::Answer(a) => answer.push_str(&a),
        }
    }
    (reasoning, answer)
}

/// A piece of an answer, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Reasoning(String),
    Answer(String),
}

#[derive(Debug)]
enum State {
    /// Before anything but whitespace: the answer may still open a block.
    Start,
    /// Inside the block.
    Inside,
    /// After the block closed, before the answer's first non-whitespace.
    Closed,
    Answer,
}

/// Splits an answer as it streams. A tail that could still be the start of a tag is held
/// back until the next text says what it is.
#[derive(Debug)]
pub struct Splitter {
    state: State,
    held: String,
    saw_block: bool,
    tags: Tags,
}

impl Splitter {
    pub fn new(t: Thinking) -> Self {
        let state = if t.opened_by_prompt {
            State::Inside
        } else {
            State::Start
        };
        Splitter {
            saw_block: t.opened_by_prompt,
            state,
            held: String::new(),
            tags: t.tags,
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Part> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Start => {
                    let open = self.tags.open;
                    let lead = self.held.trim_start();
                    if let Some(rest) = lead.strip_prefix(open) {
                        self.held = rest.to_string();
                        self.state = State::Inside;
                        self.saw_block = true;
                    } else if open.starts_with(lead) {
                        return out;
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Inside => match self.held.find(self.tags.close) {
                    Some(at) => {
                        if at > 0 {
                            out.push(Part::Reasoning(self.held[..at].to_string()));
                        }
                        self.held = self.held[at + self.tags.close.len()..].to_string();
                        self.state = State::Closed;
                    }
                    None => {
                        let keep = partial_tag(&self.held, self.tags.close);
                        let send = self.held.len() - keep;
                        if send > 0 {
                            out.push(Part::Reasoning(self.held[..send].to_string()));
                            self.held.drain(..send);
                        }
                        return out;
                    }
                },
                State::Closed => {
                    let rest = self.held.trim_start();
                    if rest.is_empty() {
                        self.held.clear();
                        return out;
                    }
                    self.held = rest.to_string();
                    self.state = State::Answer;
                }
                State::Answer => {
                    if !self.held.is_empty() {
                        out.push(Part::Answer(std::mem::take(&mut self.held)));
                    }
                    return out;
                }
            }
        }
    }

    /// What is still held at the end: a partial tag is text after all.
    pub fn finish(&mut self) -> Vec<Part> {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return Vec::new();
        }
        match self.state {
            State::Inside => vec![Part::Reasoning(held)],
            State::Closed => Vec::new(),
            State::Start | State::Answer => vec![Part::Answer(held)],
        }
    }
}

/// Bytes at the end of `text` that are a proper prefix of `tag` (and so may become it).
pub(crate) fn partial_tag(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| {
            text.len() >= n
                && text.is_char_boundary(text.len() - n)
                && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENED: Thinking = Thinking {
        opened_by_prompt: true,
        tags: THINK,
    };
    const CLOSED: Thinking = Thinking {
        opened_by_prompt: false,
        tags: THINK,
    };

    #[test]
    fn whole_answers_split() {
        let some = |s: &str| Some(s.to_string());
        for (text, t, want) in [
            (
                "<think>plan</think>\n\nAnswer.",
                CLOSED,
                (some("plan"), "Answer."),
            ),
            ("  <think>a</think>b", CLOSED, (some("a"), "b")),
            (
                "No block <think>x</think>",
                CLOSED,
                (None, "No block <think>x</think>"),
            ),
            ("plan</think>Answer", OPENED, (some("plan"), "Answer")),
            (
                "cut off mid-thought",
                OPENED,
                (some("cut off mid-thought"), ""),
            ),
            ("<think></think>Hi", CLOSED, (some(""), "Hi")),
            ("<thin", CLOSED, (None, "<thin")),
            ("", CLOSED, (None, "")),
        ] {
            let (r, a) = split(text, t);
            assert_eq!((r, a.as_str()), (want.0, want.1), "{text:?}");
        }
    }

    /// Streamed in two pieces at every split point, an answer comes out as it does whole.
    #[test]
    fn streamed_equals_whole_at_every_split() {
        for (text, t) in [
            (
                "<think>a plan, then </thin more</think>\n The answer </think>",
                CLOSED,
            ),
            ("reasoning < / think </think>answer", OPENED),
            ("<th is not a tag", CLOSED),
            ("ünïcödé <think>ß</think>é", CLOSED),
        ] {
            let whole = split(text, t);
            for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                let mut s = Splitter::new(t);
                let mut parts = s.push(&text[..at]);
                parts.extend(s.push(&text[at..]));
                parts.extend(s.finish());
                let (r, a) = join(parts);
                assert_eq!(
                    (r.unwrap_or_default(), a),
                    (whole.0.clone().unwrap_or_default(), whole.1.clone()),
                    "{text:?} split at {at}"
                );
            }
        }
    }
}
