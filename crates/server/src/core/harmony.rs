//! gpt-oss's harmony format: an answer is a run of messages, each a header and a body.
//!
//! ```text
//! <|channel|>analysis<|message|>The user wants the weather.<|end|>
//! <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
//! ```
//!
//! (one line here, one string in the answer). The prompt ends with `<|start|>assistant`, so
//! the first header starts without it. A header names a channel (`analysis`: reasoning;
//! `final`: the answer; `commentary`: a preamble to the user, or a call), and a call's
//! recipient, `to=functions.NAME`. The recipient may stand in the channel's part (as above)
//! or right after the role (`<|start|>assistant to=functions.NAME<|channel|>commentary
//! json<|message|>`, the way gpt-oss's template writes past calls). A body ends at `<|end|>`,
//! or where the answer ends: `<|return|>` after the final message and `<|call|>` after a
//! call end generation and render no text. One call per answer, because `<|call|>` ends it.
//!
//! The markers are the vocabulary's own tokens. llama.cpp renders `<|channel|>`,
//! `<|message|>`, `<|start|>`, `<|constrain|>` and (in a harmony vocabulary) `<|end|>` as text
//! (`engine/src/tokenizer/vocab.rs`), and so do we, so the answer's text holds them. This
//! module reads that text ([`HarmonyStream`], streamed or whole), and writes the grammar
//! that keeps a call well-formed ([`grammar`]): free reasoning, then a call whose arguments
//! follow the tool's schema, or (with `auto`) a final answer. A message whose recipient is
//! not one of `functions` (gpt-oss's built-in browser or python tools) is shown as text, so
//! nothing the model wrote is dropped.

use ferrox_engine::tokenizer::Tokenizer;
use serde_json::Value;

use crate::core::grammar::{with_layout, GrammarRequest, GrammarSpec};
use crate::core::piece::AnswerPiece;
use crate::core::reasoning::partial_tag;
use crate::core::tools::{Parallel, ToolCall, ToolChoice, Tools};

pub const START: &str = "<|start|>";
pub const END: &str = "<|end|>";
pub const MESSAGE: &str = "<|message|>";
pub const CHANNEL: &str = "<|channel|>";
pub const CONSTRAIN: &str = "<|constrain|>";
/// Ends a call's answer (a control token: it renders no text).
pub const CALL: &str = "<|call|>";

/// Whether a chat template writes harmony (gpt-oss's): its channels and its call marker.
pub fn is_harmony_template(source: &str) -> bool {
    source.contains(CHANNEL) && source.contains(CALL)
}

/// How the grammar asks for `<|end|>` and `<|call|>`: by id where the vocabulary has them as
/// control tokens (llguidance never matches text to a control token), else as text. The
/// other markers are always text (`engine/src/tokenizer/vocab.rs` renders them, as
/// llama.cpp does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    end: Option<u32>,
    call: Option<u32>,
    /// The template's prompt opens the analysis channel: answers start inside it.
    in_analysis: bool,
}

impl Marks {
    pub fn of(tokenizer: &Tokenizer) -> Marks {
        let control = |m: &str| tokenizer.token_id(m).filter(|&id| tokenizer.is_control(id));
        Marks {
            end: control(END),
            call: control(CALL),
            in_analysis: false,
        }
    }

    /// The same, for a template whose prompt opens the analysis channel.
    pub fn in_analysis(self) -> Marks {
        Marks {
            in_analysis: true,
            ..self
        }
    }
}

/// A header longer than this without `<|message|>` is not one: the model is writing text.
const MAX_HEADER: usize = 256;

/// What a message's body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Reasoning,
    Text,
    Call,
}

#[derive(Debug)]
enum State {
    /// Between messages: a header is being read.
    Header,
    Body(Body),
    /// Not harmony after all: everything from here is text.
    Plain,
}

/// Reads a harmony answer as it streams: reasoning, text, and (when the request offered
/// tools) calls. A tail that could still be the start of a marker is held back until the
/// next text says what it is. A call counts once its body ended with complete JSON, so a
/// cut answer may have begun a call that does not count.
#[derive(Debug)]
pub struct HarmonyStream {
    state: State,
    held: String,
    /// Analysis goes to reasoning (else to text, its markers dropped).
    reasoning: bool,
    /// `functions.*` recipients are calls (else their bodies are text).
    tools: bool,
    /// The call whose body is being read.
    current: Option<ToolCall>,
    /// Calls whose body ended with complete JSON.
    done: Vec<ToolCall>,
    /// Whether any call began, and any analysis message.
    began_call: bool,
    saw_reasoning: bool,
}

impl HarmonyStream {
    /// `in_analysis`: the prompt opened an analysis message, so the answer starts inside it.
    pub fn new(tools: bool, reasoning: bool, in_analysis: bool) -> Self {
        HarmonyStream {
            state: match in_analysis {
                true => State::Body(Body::Reasoning),
                false => State::Header,
            },
            held: String::new(),
            reasoning,
            tools,
            current: None,
            done: Vec::new(),
            began_call: false,
            saw_reasoning: in_analysis,
        }
    }

    /// Whether a call's body ended with complete JSON.
    pub fn called(&self) -> bool {
        !self.done.is_empty()
    }

    pub fn push(&mut self, text: &str) -> Vec<AnswerPiece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Plain => {
                    if !self.held.is_empty() {
                        out.push(AnswerPiece::Text(std::mem::take(&mut self.held)));
                    }
                    return out;
                }
                State::Header => match self.held.find(MESSAGE) {
                    Some(at) if at <= MAX_HEADER => {
                        let header = self.held[..at].to_string();
                        self.held.drain(..at + MESSAGE.len());
                        let body = self.open(&header, &mut out);
                        self.state = State::Body(body);
                    }
                    _ if self.held.len() <= MAX_HEADER && could_be_header(&self.held) => {
                        return out
                    }
                    _ => self.state = State::Plain,
                },
                State::Body(body) => match self.held.find(END) {
                    Some(at) => {
                        let content = self.held[..at].to_string();
                        self.held.drain(..at + END.len());
                        self.send(body, content, &mut out);
                        self.close(body);
                        self.state = State::Header;
                    }
                    None => {
                        let keep = partial_tag(&self.held, END);
                        let content: String = self.held.drain(..self.held.len() - keep).collect();
                        self.send(body, content, &mut out);
                        return out;
                    }
                },
            }
        }
    }

    /// The end of the answer: a body's held tail is its own; a header's is markup.
    pub fn finish(&mut self) -> Vec<AnswerPiece> {
        let held = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        match self.state {
            State::Plain if !held.is_empty() => out.push(AnswerPiece::Text(held)),
            State::Body(body) => {
                self.send(body, held, &mut out);
                self.close(body);
            }
            _ => {}
        }
        self.state = State::Header;
        out
    }

    /// A header read: what its body is (a call announced by name).
    fn open(&mut self, header: &str, out: &mut Vec<AnswerPiece>) -> Body {
        let word_after = |key: &str| {
            header.find(key).map(|at| {
                let rest = &header[at + key.len()..];
                let end = rest
                    .find(|c: char| c.is_whitespace() || c == '<')
                    .unwrap_or(rest.len());
                rest[..end].to_string()
            })
        };
        let channel = word_after(CHANNEL);
        match word_after("to=") {
            Some(to) => match to.strip_prefix("functions.").filter(|_| self.tools) {
                Some(name) => {
                    self.began_call = true;
                    self.current = Some(ToolCall {
                        name: name.to_string(),
                        arguments: String::new(),
                    });
                    out.push(AnswerPiece::CallStart(name.to_string()));
                    Body::Call
                }
                None => Body::Text,
            },
            None if channel.as_deref() == Some("analysis") => {
                self.saw_reasoning = true;
                Body::Reasoning
            }
            None => Body::Text,
        }
    }

    fn send(&mut self, body: Body, content: String, out: &mut Vec<AnswerPiece>) {
        if content.is_empty() {
            return;
        }
        out.push(match body {
            Body::Reasoning if self.reasoning => AnswerPiece::Reasoning(content),
            Body::Reasoning | Body::Text => AnswerPiece::Text(content),
            Body::Call => {
                if let Some(c) = self.current.as_mut() {
                    c.arguments.push_str(&content);
                }
                AnswerPiece::Arguments(content)
            }
        });
    }

    /// A body ended: a call counts if its arguments are complete JSON.
    fn close(&mut self, body: Body) {
        if body != Body::Call {
            return;
        }
        if let Some(c) = self.current.take() {
            if serde_json::from_str::<Value>(c.arguments.trim()).is_ok() {
                self.done.push(c);
            }
        }
    }
}

/// Whether `text` (what follows the prompt's `<|start|>assistant`, or a message's `<|end|>`)
/// begins as a header may: a role, a channel or a recipient, or a prefix of one.
fn could_be_header(text: &str) -> bool {
    let t = text.trim_start_matches(['\n', ' ']);
    [START, CHANNEL, "to="]
        .iter()
        .any(|m| t.starts_with(m) || m.starts_with(t))
}

/// A whole answer read: its reasoning (`None` without an analysis message), its text, and
/// its calls (`None`: an `auto` answer that made none, or a request without tools).
pub fn read(
    text: &str,
    tools: Option<&Tools>,
    reasoning: bool,
    in_analysis: bool,
) -> (Option<String>, String, Option<Vec<ToolCall>>) {
    let mut s = HarmonyStream::new(tools.is_some(), reasoning, in_analysis);
    let mut pieces = s.push(text);
    pieces.extend(s.finish());
    let (mut thought, mut said) = (None::<String>, String::new());
    for p in pieces {
        match p {
            AnswerPiece::Reasoning(r) => thought.get_or_insert_with(String::new).push_str(&r),
            AnswerPiece::Text(t) => said.push_str(&t),
            AnswerPiece::CallStart(_) | AnswerPiece::Arguments(_) => {}
        }
    }
    if s.saw_reasoning && reasoning {
        thought.get_or_insert_with(String::new);
    }
    let calls = tools
        .filter(|t| s.began_call || t.choice != ToolChoice::Auto)
        .map(|_| std::mem::take(&mut s.done));
    (thought, said, calls)
}

/// The grammar of a harmony answer without tools whose answer is asked to be JSON
/// (`response_format`): free analysis, then the final message through the schema. `None`
/// for a grammar or a regex, which then shapes the whole output as for any model.
pub fn answer_grammar(answer: &GrammarRequest, marks: Marks) -> Option<GrammarRequest> {
    let schema = with_layout(answer.structured().ok()?);
    let tools = Tools {
        tools: Vec::new(),
        choice: ToolChoice::Auto,
        parallel: Parallel::Off,
    };
    Some(GrammarRequest {
        spec: GrammarSpec::Lark(grammar(&tools, Some(&schema), marks)),
        param: answer.param.clone(),
    })
}

/// The grammar of a harmony answer with tools (or, with none callable, of its final answer):
/// any number of analysis messages (free
/// text up to `<|end|>`; the first one already open if the prompt opened it), then a call (`required`, a named tool) or a call or the final
/// message (`auto`; the final message is `answer`'s JSON when a structured answer is asked
/// for beside the tools). A call is one of the callable tools, its recipient in either
/// place, its arguments through the tool's schema, closed by `<|call|>`. Markers the
/// vocabulary has as control tokens are asked for by id ([`Marks`]); the others, as their
/// text. `answer` is a schema with its layout already applied.
pub fn grammar(tools: &Tools, answer: Option<&Value>, marks: Marks) -> String {
    let by_id = |id: Option<u32>, m: &str| match id {
        Some(id) => format!("<[{id}]>"),
        None => format!("{m:?}"),
    };
    let text = |m: &str| format!("{m:?}");
    let (start, message, channel, constrain) =
        (text(START), text(MESSAGE), text(CHANNEL), text(CONSTRAIN));
    let (end, call) = (by_id(marks.end, END), by_id(marks.call, CALL));
    let mut g = String::new();
    let callable = tools.callable();
    let reply = match (callable.is_empty(), &tools.choice) {
        (true, _) => "final",
        (false, ToolChoice::Auto) => "call | final",
        (false, _) => "call",
    };
    let opened = match marks.in_analysis {
        true => format!("thought {start} \"assistant\" "),
        false => String::new(),
    };
    g.push_str(&format!("start: {opened}analysis* ({reply})\n"));
    g.push_str(&format!(
        "analysis: {channel} \"analysis\" {message} thought {start} \"assistant\"\n"
    ));
    // `stop` ends the free text lazily at the first `<|end|>` and consumes it.
    g.push_str(&format!("thought[stop={end}]: /[\\s\\S]*/\n"));
    let final_body = match answer {
        Some(schema) => format!("%json {schema}"),
        None => "/[\\s\\S]*/".to_string(),
    };
    g.push_str(&format!(
        "final: {channel} \"final\" {message} final_body\nfinal_body: {final_body}\n"
    ));
    if !callable.is_empty() {
        let alternatives: Vec<String> = (0..callable.len()).map(|i| format!("call_{i}")).collect();
        g.push_str(&format!("call: {}\n", alternatives.join(" | ")));
        g.push_str(&format!(
            "content_type: (\" \" {constrain}? \"json\")?\nchan: {channel} (\"commentary\" | \"analysis\")\n"
        ));
    }
    for (i, t) in callable.iter().enumerate() {
        let to = format!("\" to=functions.{}\"", t.name);
        g.push_str(&format!(
            "call_{i}: ({to} chan | chan {to}) content_type {message} args_{i} {call}\n\
             args_{i}: %json {}\n",
            with_layout(t.parameters.clone())
        ));
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tools::tests::weather_tools;
    use crate::core::tools::Parallel;

    const THOUGHT_THEN_CALL: &str = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
    const ROLE_RECIPIENT: &str = "<|channel|>analysis<|message|>Call it.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Rome\"}";
    const THOUGHT_THEN_FINAL: &str = "<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!";

    fn whole(text: &str, choice: ToolChoice) -> (Option<String>, String, Option<Vec<ToolCall>>) {
        read(
            text,
            Some(&weather_tools(choice, Parallel::Off)),
            true,
            false,
        )
    }

    #[test]
    fn calls_reasoning_and_answers_are_read() {
        let (r, t, calls) = whole(THOUGHT_THEN_CALL, ToolChoice::Auto);
        assert_eq!(r.as_deref(), Some("Need the weather."));
        assert_eq!(t, "");
        let calls = calls.unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, "{\"city\": \"Paris\"}");
        let (_, _, calls) = whole(ROLE_RECIPIENT, ToolChoice::Auto);
        assert_eq!(calls.unwrap()[0].arguments, "{\"city\": \"Rome\"}");
        let (r, t, calls) = whole(THOUGHT_THEN_FINAL, ToolChoice::Auto);
        assert_eq!(
            (r.as_deref(), t.as_str(), calls),
            (Some("The user greets."), "Hello!", None)
        );
        // `required` with no call: an empty list, not text.
        let (_, _, calls) = whole(THOUGHT_THEN_FINAL, ToolChoice::Required);
        assert_eq!(calls, Some(Vec::new()));
        // Without tools a call's body is text, and without the split analysis is text too.
        let (r, t, calls) = read(THOUGHT_THEN_CALL, None, false, false);
        assert_eq!(r, None);
        assert_eq!(t, "Need the weather.{\"city\": \"Paris\"}");
        assert_eq!(calls, None);
    }

    #[test]
    fn a_cut_call_does_not_count_and_plain_text_stays_text() {
        let cut = &THOUGHT_THEN_CALL[..THOUGHT_THEN_CALL.len() - 4];
        let (_, _, calls) = whole(cut, ToolChoice::Auto);
        assert_eq!(
            calls,
            Some(Vec::new()),
            "began, but its JSON is not complete"
        );
        let (r, t, calls) = whole("Just text, <b>no</b> markers.", ToolChoice::Auto);
        assert_eq!(
            (r, t.as_str(), calls),
            (None, "Just text, <b>no</b> markers.", None)
        );
        // A built-in tool's message is text, not dropped.
        let browse = "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary to=browser.search json<|message|>{\"q\": 1}";
        let (_, t, calls) = whole(browse, ToolChoice::Auto);
        assert_eq!((t.as_str(), calls), ("{\"q\": 1}", None));
        // A prompt that opened the analysis channel: the answer starts inside it.
        let (r, t, _) = read(
            "thinking<|end|><|start|>assistant<|channel|>final<|message|>Hi",
            None,
            true,
            true,
        );
        assert_eq!((r.as_deref(), t.as_str()), (Some("thinking"), "Hi"));
    }

    /// The grammar takes what the reader reads (both places of the recipient, reasoning
    /// first or not, `<|call|>` last; a final answer only with `auto`), and refuses a call
    /// to a tool that was not offered or with arguments outside its schema.
    #[test]
    fn the_grammar_takes_what_the_reader_reads() {
        use crate::core::grammar::{GrammarSpec, Grammars};
        use ferrox_engine::synthetic::{self, SyntheticSpec};
        use std::sync::Arc;

        let spec = SyntheticSpec {
            n_vocab: 512,
            control_tokens: synthetic::HARMONY_TOKENS,
            ..SyntheticSpec::tiny(ferrox_engine::Arch::Gemma3, 7)
        };
        let model = Arc::new(synthetic::load(&spec, 1).unwrap());
        let tok = model.tokenizer();
        let marks = Marks::of(tok);
        assert!(marks.call.is_some() && marks.end.is_none(), "{marks:?}");
        let grammars = Grammars::new(Arc::clone(&model));
        // Whether a constrained model can write `text` (and then `<|call|>`, for a call): at
        // each step some allowed token spells the text's next bytes (the longest is taken;
        // llguidance allows only the canonical tokens of text the grammar forces).
        let takes_with = |marks: Marks, choice: ToolChoice, text: &str| -> bool {
            let tools = weather_tools(choice, Parallel::Off);
            let request = crate::core::grammar::GrammarRequest {
                spec: GrammarSpec::Lark(grammar(&tools, None, marks)),
                param: "tools".into(),
            };
            let constraint = grammars.compile(&request).unwrap();
            let mut row = constraint.0.start();
            let mut mask = vec![0u32; tok.vocab_size().div_ceil(32)];
            let mut rest = text.as_bytes();
            let allowed = |mask: &[u32], id: u32| mask[id as usize / 32] >> (id % 32) & 1 == 1;
            while !rest.is_empty() {
                mask.fill(0);
                row.allowed(&mut mask).unwrap();
                let best = (0..tok.vocab_size() as u32)
                    .filter(|&id| allowed(&mask, id))
                    .map(|id| (tok.token_bytes(id), id))
                    .filter(|(b, _)| !b.is_empty() && rest.starts_with(b))
                    .max_by_key(|(b, _)| b.len());
                let Some((bytes, id)) = best else {
                    return false;
                };
                rest = &rest[bytes.len()..];
                row.advance(id).unwrap();
            }
            if text.contains("to=functions.") {
                mask.fill(0);
                row.allowed(&mut mask).unwrap();
                return allowed(&mask, tok.token_id(CALL).unwrap());
            }
            true
        };
        let takes = |choice: ToolChoice, text: &str| takes_with(marks, choice, text);
        let call = |head: &str, args: &str| {
            format!("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant{head}<|message|>{args}")
        };
        let valid = "{\"city\": \"Paris\"}";
        for head in [
            "<|channel|>commentary to=functions.get_weather <|constrain|>json",
            " to=functions.get_weather<|channel|>commentary json",
        ] {
            assert!(takes(ToolChoice::Required, &call(head, valid)), "{head}");
            assert!(
                !takes(ToolChoice::Required, &call(head, "{\"city\": 3}")),
                "{head}"
            );
        }
        let other = "<|channel|>commentary to=functions.get_time <|constrain|>json";
        assert!(!takes(ToolChoice::Required, &call(other, valid)));
        assert!(takes(ToolChoice::Auto, THOUGHT_THEN_FINAL));
        assert!(!takes(ToolChoice::Required, THOUGHT_THEN_FINAL));
        let direct =
            format!("<|channel|>commentary to=functions.get_weather json<|message|>{valid}");
        assert!(takes(ToolChoice::Auto, &direct));
        // A prompt that opened the analysis channel: the answer starts inside it.
        let opened = format!("Think.<|end|><|start|>assistant{direct}");
        assert!(takes_with(marks.in_analysis(), ToolChoice::Auto, &opened));
        assert!(!takes(ToolChoice::Auto, &opened));
    }

    /// Streamed in two pieces at every split point, an answer reads as it does whole.
    #[test]
    fn streamed_equals_whole_at_every_split() {
        for text in [
            THOUGHT_THEN_CALL,
            ROLE_RECIPIENT,
            THOUGHT_THEN_FINAL,
            "plain <|en text",
        ] {
            let (r, t, calls) = whole(text, ToolChoice::Auto);
            for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                let mut s = HarmonyStream::new(true, true, false);
                let mut pieces = s.push(&text[..at]);
                pieces.extend(s.push(&text[at..]));
                pieces.extend(s.finish());
                let (mut sr, mut st, mut sc) =
                    (String::new(), String::new(), Vec::<ToolCall>::new());
                for p in pieces {
                    match p {
                        AnswerPiece::Reasoning(x) => sr.push_str(&x),
                        AnswerPiece::Text(x) => st.push_str(&x),
                        AnswerPiece::CallStart(name) => sc.push(ToolCall {
                            name,
                            arguments: String::new(),
                        }),
                        AnswerPiece::Arguments(a) => sc.last_mut().unwrap().arguments.push_str(&a),
                    }
                }
                assert_eq!(sr, r.clone().unwrap_or_default(), "{text:?} at {at}");
                assert_eq!(st, t, "{text:?} at {at}");
                assert_eq!(
                    Some(sc).filter(|c| !c.is_empty()),
                    calls.clone().filter(|c| !c.is_empty()),
                    "{text:?} at {at}"
                );
                assert_eq!(s.called(), calls.as_ref().is_some_and(|c| !c.is_empty()));
            }
        }
    }
}
