//! An answer read as what it is — text, a thinking model's reasoning, or tool calls — the
//! same way whether it streams ([`AnswerStream`], piece by piece) or comes whole
//! ([`Answer::read`], which every adapter's buffered reply uses). Both run the family's one
//! call reader (`core/tool_syntax.rs`) and the one reasoning splitter (`core/reasoning.rs`),
//! so a streamed answer and a buffered one agree by construction: calls only once their
//! object has closed, never the call markup as text. gpt-oss's harmony answers, whose
//! reasoning and calls are messages of one syntax, have their own reader
//! (`core/harmony.rs`), chosen the same way for both.

use crate::core::harmony::{self, HarmonyStream};
pub use crate::core::piece::AnswerPiece;
use crate::core::reasoning::{self, Part, Splitter, Thinking};
use crate::core::tool_syntax::{CallPiece, CallStream, ToolFormat};
use crate::core::tools::{ToolCall, ToolChoice, Tools};

/// A whole answer, read once.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// A thinking model's reasoning, apart from the answer.
    pub reasoning: Option<String>,
    /// The answer's text (the reasoning taken out). When it is calls, only what the model
    /// said to the user beside them (a harmony preamble): call markup is never text.
    pub text: String,
    /// The calls, when the answer is calls (`None`: it is text). Only calls whose object
    /// closed count, so a cut answer may hold fewer than it began, or none.
    pub calls: Option<Vec<ToolCall>>,
}

impl Answer {
    /// Reads `text`, the whole output of a choice: the reasoning split off when the model
    /// thinks, then calls in `format`'s syntax when the request offered `tools`.
    pub fn read(
        text: &str,
        tools: Option<&Tools>,
        format: ToolFormat,
        thinking: Option<Thinking>,
    ) -> Answer {
        if let Some((reasoning, in_analysis)) = harmony_mode(tools, format, thinking) {
            let (reasoning, text, calls) = harmony::read(text, tools, reasoning, in_analysis);
            return Answer {
                reasoning,
                text,
                calls,
            };
        }
        let (reasoning, text) = match thinking {
            Some(t) => reasoning::split(text, t),
            None => (None, text.to_string()),
        };
        let calls = tools.and_then(|t| format.parse(&t.choice, &text));
        let text = match calls {
            Some(_) => String::new(),
            None => text,
        };
        Answer {
            reasoning,
            text,
            calls,
        }
    }

    /// Whether the answer made at least one call (its finish is then a tool call's).
    pub fn called(&self) -> bool {
        self.calls.as_ref().is_some_and(|c| !c.is_empty())
    }
}

#[derive(Debug)]
enum Mode {
    /// `auto`, before the answer's first character.
    Undecided(ToolFormat),
    Text,
    Call(CallStream),
    /// A thinking model's answer without tools: reasoning, then text.
    Thinking(Splitter),
    /// A harmony answer: reasoning, text and calls as its messages say.
    Harmony(HarmonyStream),
}

/// Whether an answer is read as harmony messages, and if so whether its analysis is
/// reasoning and whether the prompt opened it: a harmony thinking model's, or any answer
/// with tools of a model whose calls are harmony messages.
fn harmony_mode(
    tools: Option<&Tools>,
    format: ToolFormat,
    thinking: Option<Thinking>,
) -> Option<(bool, bool)> {
    let thinking = thinking.filter(|t| t.tags == reasoning::HARMONY);
    let calls = tools.is_some() && matches!(format, ToolFormat::Harmony(_));
    (thinking.is_some() || calls).then(|| {
        (
            thinking.is_some(),
            thinking.is_some_and(|t| t.opened_by_prompt),
        )
    })
}

/// Turns the text of an answer, as it streams, into text or call pieces: a `required` or
/// named answer is calls from its first character; an `auto` one is told by its first
/// character (`core/tool_syntax.rs`), then goes one way for good.
#[derive(Debug)]
pub struct AnswerStream {
    mode: Mode,
}

impl AnswerStream {
    pub fn new(tools: &Tools, format: ToolFormat) -> Self {
        let mode = match tools.choice {
            ToolChoice::Auto => Mode::Undecided(format),
            _ => Mode::Call(CallStream::new(format)),
        };
        AnswerStream { mode }
    }

    /// The stream of a request's answer: with tools as [`Self::new`]; without them, a
    /// thinking model's reasoning then text, or plain text from the start.
    pub fn for_request(
        tools: Option<&Tools>,
        format: ToolFormat,
        thinking: Option<Thinking>,
    ) -> Self {
        if let Some((reasoning, in_analysis)) = harmony_mode(tools, format, thinking) {
            let stream = HarmonyStream::new(tools.is_some(), reasoning, in_analysis);
            return AnswerStream {
                mode: Mode::Harmony(stream),
            };
        }
        match (tools, thinking) {
            (Some(t), _) => Self::new(t, format),
            (None, Some(t)) => AnswerStream {
                mode: Mode::Thinking(Splitter::new(t)),
            },
            (None, None) => AnswerStream { mode: Mode::Text },
        }
    }

    /// Known to be text (a request without tools, or an `auto` answer that began as text).
    pub fn is_text(&self) -> bool {
        matches!(self.mode, Mode::Text)
    }

    pub fn push(&mut self, text: &str) -> Vec<AnswerPiece> {
        if let Mode::Undecided(format) = self.mode {
            if text.is_empty() {
                return Vec::new();
            }
            self.mode = match format.begins_call(text) {
                true => Mode::Call(CallStream::new(format)),
                false => Mode::Text,
            };
        }
        match &mut self.mode {
            Mode::Undecided(_) => Vec::new(),
            Mode::Text if text.is_empty() => Vec::new(),
            Mode::Text => vec![AnswerPiece::Text(text.to_string())],
            Mode::Call(stream) => stream.push(text).into_iter().map(Into::into).collect(),
            Mode::Thinking(split) => split.push(text).into_iter().map(Into::into).collect(),
            Mode::Harmony(stream) => stream.push(text),
        }
    }

    /// The last pieces (a thinking model's held text), and whether the answer made a call.
    pub fn finish(&mut self) -> (Vec<AnswerPiece>, bool) {
        match &mut self.mode {
            Mode::Undecided(_) | Mode::Text => (Vec::new(), false),
            Mode::Call(stream) => (Vec::new(), stream.called()),
            Mode::Thinking(split) => (split.finish().into_iter().map(Into::into).collect(), false),
            Mode::Harmony(stream) => (stream.finish(), stream.called()),
        }
    }
}

impl From<Part> for AnswerPiece {
    fn from(p: Part) -> Self {
        match p {
            Part::Reasoning(r) => AnswerPiece::Reasoning(r),
            Part::Answer(a) => AnswerPiece::Text(a),
        }
    }
}

impl From<CallPiece> for AnswerPiece {
    fn from(p: CallPiece) -> Self {
        match p {
            CallPiece::Start(name) => AnswerPiece::CallStart(name),
            CallPiece::Arguments(a) => AnswerPiece::Arguments(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tools::tests::weather_tools;
    use crate::core::tools::Parallel;

    fn tools(choice: ToolChoice) -> Tools {
        weather_tools(choice, Parallel::Asked)
    }

    #[test]
    fn an_auto_answer_is_told_by_its_first_character() {
        let t = tools(ToolChoice::Auto);
        let mut s = AnswerStream::new(&t, ToolFormat::Hermes);
        assert_eq!(s.push(""), Vec::new());
        assert_eq!(s.push("Sun"), vec![AnswerPiece::Text("Sun".into())]);
        assert!(s.is_text());
        let mut s = AnswerStream::new(&t, ToolFormat::Hermes);
        let mut pieces = s.push("<tool_call>\n{\"name\": \"get_weather\", ");
        pieces.extend(s.push("\"arguments\": {}}\n</tool_call>"));
        assert_eq!(
            pieces,
            vec![
                AnswerPiece::CallStart("get_weather".into()),
                AnswerPiece::Arguments("{}".into())
            ]
        );
        assert!(s.finish().1);
    }

    #[test]
    fn a_whole_answer_reads_as_the_stream_does() {
        let t = tools(ToolChoice::Auto);
        let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
        let a = Answer::read(call, Some(&t), ToolFormat::Hermes, None);
        assert!(a.called());
        assert_eq!(
            a.calls.as_ref().unwrap()[0].arguments,
            r#"{"city": "Rome"}"#
        );
        // Cut before the object closed: no call, and no markup as text either.
        let cut = Answer::read(&call[..30], Some(&t), ToolFormat::Hermes, None);
        assert_eq!(cut.calls, Some(Vec::new()));
        assert!(!cut.called());
        let text = Answer::read("Sunny.", Some(&t), ToolFormat::Hermes, None);
        assert_eq!((text.calls, text.text.as_str()), (None, "Sunny."));
        let thinking = Thinking {
            opened_by_prompt: false,
            tags: reasoning::THINK,
        };
        let thought = Answer::read(
            "<think>hm</think>Sunny.",
            None,
            ToolFormat::Hermes,
            Some(thinking),
        );
        assert_eq!(thought.reasoning.as_deref(), Some("hm"));
        assert_eq!(thought.text, "Sunny.");
    }
}
