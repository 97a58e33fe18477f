//! Tool calling, protocol-free: the tools a request offers and the calls an answer makes, as
//! types, and the function-tool object OpenAI's and Ollama's APIs both describe a tool
//! with. The rest is beside it, each in one place: the syntax of calls is the model
//! family's (`core/tool_syntax.rs`), the conversation as the model's template takes it is
//! `core/conversation.rs`, and an answer read as text or calls is `core/answer.rs`.
//!
//! The choice: `required` or a named tool makes the whole answer calls (the grammar holds
//! an `anyOf` over the tools, each with its own parameter schema, so even a 270M model emits
//! arguments that validate); `auto` lets the model answer with text or with calls; `none`
//! offers nothing (no grammar, and the tools are not described).
//!
//! Several calls in one answer only when the request allows them ([`Parallel`]: OpenAI's
//! `parallel_tool_calls`, false by default as in llama-server; Anthropic's
//! `disable_parallel_tool_use`, allowed by default as its API says, for families with a
//! call syntax of their own) and the family has a syntax for them (Llama 3 has none).
//!

use serde_json::{json, Value};

use crate::core::error::ApiError;
use crate::http::params::{kind, Fields};

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema for the arguments (an object schema; `{}` when the tool takes none).
    pub parameters: Value,
}

impl Tool {
    /// A `tools` list of function tools ([`Tool::from_function`] each); absent is none.
    pub fn from_functions(value: Option<Value>) -> Result<Vec<Tool>, ApiError> {
        match value {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, t)| Tool::from_function(t, &format!("tools[{i}]")))
                .collect(),
            Some(other) => Err(ApiError::invalid(
                "tools",
                format!("expected an array, got {}", kind(&other)),
            )),
        }
    }

    /// A tool as OpenAI's chat API writes one, `{"type": "function", "function": {"name",
    /// "description", "parameters", "strict"}}` — the shape Hugging Face's templates take
    /// (`Tools::template_json` writes it back) and Ollama's API takes too. `path` names it
    /// in errors.
    pub fn from_function(value: Value, path: &str) -> Result<Tool, ApiError> {
        let mut t = Fields::nested(value, path)?;
        let ty: String = t.require("type")?;
        if ty != "function" {
            return Err(ApiError::invalid(
                t.path("type"),
                format!("tools of type {ty:?} are not supported; only \"function\""),
            ));
        }
        let fpath = t.path("function");
        let func = t.require_raw("function")?;
        t.finish()?;
        let mut f = Fields::nested(func, &fpath)?;
        let name: String = f.require("name")?;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(ApiError::invalid(
                f.path("name"),
                "must be a non-empty name of letters, digits, _ and -",
            ));
        }
        let description = f.take::<String>("description")?;
        let parameters = f.take_raw("parameters").unwrap_or_else(
            || json!({"type": "object", "properties": {}, "additionalProperties": false}),
        );
        if !parameters.is_object() {
            return Err(ApiError::invalid(
                f.path("parameters"),
                "must be a JSON schema object",
            ));
        }
        f.take::<bool>("strict")?;
        f.finish()?;
        Ok(Tool {
            name,
            description,
            parameters,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as JSON text, exactly as generated.
    pub arguments: String,
}

/// A request's tools and its choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    /// Whether an answer may make several calls.
    pub parallel: Parallel,
}

/// Whether an answer may make several calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallel {
    /// One call.
    Off,
    /// The client asked for several (OpenAI's `parallel_tool_calls: true`).
    Asked,
    /// The protocol allows several unless told not to (Anthropic): honoured for a family
    /// whose template has its own syntax for calls. A model that only learns the generic
    /// syntax from the system text (the 270M default model) tends to call again after
    /// every call until the budget runs out, so it makes one unless asked.
    ByDefault,
}

impl Tools {
    /// A protocol's parsed tools and choice, checked: a named choice must name one of the
    /// tools, and `required` or a named choice needs tools (`param` is where the choice came
    /// in). `None` when nothing is callable: no tools, or `tool_choice: none`.
    pub fn checked(
        tools: Vec<Tool>,
        choice: ToolChoice,
        parallel: Parallel,
        param: &str,
    ) -> Result<Option<Tools>, ApiError> {
        if let ToolChoice::Named(n) = &choice {
            if !tools.iter().any(|t| &t.name == n) {
                return Err(ApiError::invalid(
                    param,
                    format!("no tool named {n:?} is in tools"),
                ));
            }
        }
        match choice {
            ToolChoice::None => Ok(None),
            // What SDKs send by default, with or without tools.
            ToolChoice::Auto if tools.is_empty() => Ok(None),
            ToolChoice::Required if tools.is_empty() => {
                Err(ApiError::invalid(param, "\"required\" needs tools"))
            }
            choice => Ok(Some(Tools {
                tools,
                choice,
                parallel,
            })),
        }
    }

    /// The tools the choice leaves callable.
    pub(crate) fn callable(&self) -> Vec<&Tool> {
        match &self.choice {
            ToolChoice::None => Vec::new(),
            ToolChoice::Named(n) => self.tools.iter().filter(|t| &t.name == n).collect(),
            _ => self.tools.iter().collect(),
        }
    }

    /// The JSON list of the tools as Hugging Face's templates take it (`tools`).
    pub fn template_json(&self) -> Value {
        Value::Array(
            self.tools
                .iter()
                .map(|t| {
                    let mut f = json!({"name": t.name});
                    if let Some(d) = &t.description {
                        f["description"] = json!(d);
                    }
                    f["parameters"] = t.parameters.clone();
                    json!({"type": "function", "function": f})
                })
                .collect(),
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One weather tool, for the tests of the tool modules.
    pub(crate) fn weather_tools(choice: ToolChoice, parallel: Parallel) -> Tools {
        Tools {
            tools: vec![Tool {
                name: "get_weather".into(),
                description: Some("Weather in a city".into()),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            }],
            choice,
            parallel,
        }
    }
}
