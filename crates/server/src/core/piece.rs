//! [`AnswerPiece`]: what an answer streams as, protocol-free.
//!
//! Why a module of its own: the readers that cut an answer into pieces (`core/answer.rs`,
//! and the harmony reader it hands gpt-oss's answers to, `core/harmony.rs`) both produce
//! them, and `answer` uses `harmony`; kept here, below both, neither imports the other back.
//! Adapters name it through `core::answer`, which re-exports it.

/// What an answer streams as, protocol-free.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerPiece {
    /// Ordinary text.
    Text(String),
    /// A thinking model's reasoning (`core/reasoning.rs`).
    Reasoning(String),
    /// A call begins: its name. The calls of an answer come one after another.
    CallStart(String),
    /// More of the current call's argument text.
    Arguments(String),
}
