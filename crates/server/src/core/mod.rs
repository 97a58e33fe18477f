//! The protocol-free core: what every adapter shares and none owns. It knows no wire format
//! and no status code.
//!
//! - [`request`]: the request an adapter parses its body into ([`request::Input`] and
//!   [`request::GenerationOptions`]);
//! - [`served`]: the served model — one loaded version of a model with its template,
//!   scheduler, grammar compiler and tool syntax — and how it starts;
//! - [`generate`]: the one generation path — the prompt rendered and tokenized, one
//!   scheduler request per choice, their merged events, how each choice ended;
//! - [`grammar`]: a JSON schema, grammar or regex compiled into the scheduler's per-row
//!   constraint (llguidance), failing closed; [`gbnf`] translates llama.cpp's grammars for it;
//!   [`schema_rules`] settles what a client's schema leaves open as llama.cpp does (closed
//!   objects, bounded numbers);
//! - [`tools`]: tool calling's types — the tools offered, the calls made; [`tool_syntax`]:
//!   each model family's call syntax, its grammar, and reading calls back;
//!   [`conversation`]: the conversation as the model's template takes it (calls and results
//!   written out for a template without tools); [`answer`]: an answer read as text,
//!   reasoning or calls, streamed ([`answer::AnswerStream`]) or whole ([`answer::Answer`]),
//!   in [`piece::AnswerPiece`]s;
//! - [`reasoning`]: a thinking model's `<think>` block split from its answer; [`harmony`]:
//!   gpt-oss's harmony messages — reasoning, text and calls in one syntax — read, and its
//!   tool grammar;
//! - [`fim`]: fill-in-the-middle prompts laid out with the model's FIM tokens;
//! - [`stream`]: the stream driver, which asks a protocol's encoder what to send per event;
//! - [`ids`]: random ids (and timestamps) for replies and stored objects;
//! - [`error`]: every way a request fails, as kinds (`http/errors.rs` gives them statuses,
//!   each protocol its body).

pub mod answer;
pub mod conversation;
pub mod embed;
pub mod error;
pub mod fim;
pub mod gbnf;
pub mod generate;
pub mod grammar;
pub mod harmony;
pub mod ids;
pub mod piece;
pub mod reasoning;
pub mod request;
pub mod rerank;
pub mod schema_rules;
pub mod served;
pub mod stream;
pub mod tool_syntax;
pub mod tools;
