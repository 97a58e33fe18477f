//! `ferrox chat [MODEL]`: a conversation in the terminal, as `ollama run MODEL` has one.
//!
//! It always talks to a server over the OpenAI chat route, so a terminal chat is one more
//! client of the one decode path: with `--url` a running server's; without, a server it
//! starts in this process on a loopback port of its own, with the model (a GGUF file, or the
//! default model), which stops with the chat. The conversation is kept and sent whole each
//! turn, so the prefix cache makes every turn after the first start at once.
//!
//! Input: a line is a message; a message of several lines is written between `"""` lines
//! (or `"""` at the start of the first and the end of the last). Commands: `/help`,
//! `/clear` (a new conversation, the system prompt kept), `/system TEXT`, `/set temperature
//! X` (also `top_p`, `top_k`, `max_tokens`, `seed`), `/show`, `/save FILE` and `/load FILE`
//! (the conversation as JSON), `/bye`. Ctrl-C stops the answer being written and keeps what
//! came of it; at the prompt it says how to leave; Ctrl-D (end of input) leaves. After each
//! answer, with `--verbose`, the counts and speeds `ollama run --verbose` shows.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferrox_server::client::Endpoint;
use ferrox_server::{AppState, ModelsConfig, ServerConfig};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[derive(clap::Args)]
pub struct ChatArgs {
    /// The model: a GGUF file served in this process (default: the default model), or with
    /// --url a model id of that server (default: its first).
    pub model: Option<String>,
    /// Chat with a running server (`http://HOST:PORT`) instead of starting one.
    #[arg(long)]
    pub url: Option<String>,
    /// The key the running server asks for.
    #[arg(long, env = "FERROX_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The system prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Print counts and speeds after each answer.
    #[arg(long)]
    pub verbose: bool,
    /// Kernel threads of an in-process server (default: every core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
}

pub fn chat(args: ChatArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let result = runtime.block_on(run(args));
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn run(args: ChatArgs) -> Result<(), String> {
    let (endpoint, model) = match &args.url {
        Some(url) => {
            let mut endpoint = Endpoint::parse(url).map_err(|e| e.to_string())?;
            endpoint.api_key = args.api_key.clone();
            let model = match &args.model {
                Some(m) => m.clone(),
                None => first_model(&endpoint).await?,
            };
            (endpoint, model)
        }
        None => in_process(&args).await?,
    };
    let mut chat = Chat {
        endpoint,
        interrupts: Interrupts::new()?,
        model,
        system: args.system.clone(),
        history: Vec::new(),
        settings: Map::new(),
        verbose: args.verbose,
    };
    chat.session().await
}

/// A server in this process, on a loopback port of its own, with the model registered; the
/// model loads with the first message (its load is the first answer's wait).
async fn in_process(args: &ChatArgs) -> Result<(Endpoint, String), String> {
    let path: PathBuf = crate::resolve_model(args.model.as_ref().map(PathBuf::from))?;
    let id = path
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    let models = ModelsConfig {
        threads: args.threads.unwrap_or(ModelsConfig::default().threads),
        ..ModelsConfig::default()
    };
    let state = AppState::new(ServerConfig::default(), models);
    state.models.add(&id, path).map_err(|e| e.to_string())?;
    state.set_ready();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on a loopback port: {e}"))?;
    let endpoint = Endpoint::from_addr(listener.local_addr().map_err(|e| e.to_string())?);
    // Runs until the process ends with the chat.
    tokio::spawn(ferrox_server::run(
        listener,
        state,
        std::future::pending::<()>(),
        Duration::from_secs(1),
    ));
    Ok((endpoint, id))
}

async fn first_model(endpoint: &Endpoint) -> Result<String, String> {
    let r = endpoint
        .get("/v1/models")
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status;
    let v = r.json().await.map_err(|e| e.to_string())?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("the server lists no model (status {status}): {v}"))
}

struct Chat {
    endpoint: Endpoint,
    /// Ctrl-C, for the whole session: a signal that comes while nothing waits for it is
    /// kept for the next wait instead of lost.
    interrupts: Interrupts,
    model: String,
    system: Option<String>,
    /// The conversation so far, as chat messages.
    history: Vec<Value>,
    /// Sampling settings `/set` changed, sent with every request.
    settings: Map<String, Value>,
    verbose: bool,
}

const HELP: &str = "Commands:
  /set temperature|top_p|top_k|max_tokens|seed VALUE   change a setting
  /system TEXT      set the system prompt
  /show             the settings and the conversation's length
  /clear            start a new conversation (the system prompt stays)
  /save FILE        write the conversation as JSON
  /load FILE        read a conversation written by /save
  /bye              leave (also Ctrl-D)
A message of several lines goes between lines of \"\"\". Ctrl-C stops an answer.";

impl Chat {
    async fn session(&mut self) -> Result<(), String> {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        say(&format!("chatting with {} (/? for help)\n", self.model)).await;
        loop {
            say(">>> ").await;
            let line = tokio::select! {
                line = lines.next_line() => line.map_err(|e| e.to_string())?,
                _ = self.interrupts.next() => {
                    say("\nUse Ctrl + d or /bye to exit.\n").await;
                    continue;
                }
            };
            let Some(line) = line else {
                say("\n").await;
                return Ok(());
            };
            let (text, block) = match line.trim_start().strip_prefix("\"\"\"") {
                Some(first) => (read_block(first, &mut lines).await?, true),
                None => (line, false),
            };
            let trimmed = text.trim();
            if trimmed.is_empty() {
                continue;
            }
            // A block is a message even when it begins with `/` (a path, a comment).
            if !block && trimmed.starts_with('/') {
                if !self.command(trimmed).await {
                    return Ok(());
                }
                continue;
            }
            self.ask(text).await;
        }
    }

    /// Runs a `/` command; false when it is time to leave.
    async fn command(&mut self, line: &str) -> bool {
        let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        let reply = match name {
            "/bye" | "/exit" => return false,
            "/?" | "/help" => HELP.to_string(),
            "/clear" => {
                self.history.clear();
                "Cleared the conversation.".into()
            }
            "/system" => {
                self.system = (!rest.is_empty()).then(|| rest.to_string());
                "Set the system prompt.".into()
            }
            "/set" => self.set(rest),
            "/show" => format!(
                "model {}; settings {}; system {:?}; {} messages",
                self.model,
                Value::Object(self.settings.clone()),
                self.system.as_deref().unwrap_or(""),
                self.history.len()
            ),
            "/save" if !rest.is_empty() => {
                let saved = json!({"model": self.model, "system": self.system,
                                   "messages": self.history});
                match std::fs::write(rest, saved.to_string()) {
                    Ok(()) => format!("Saved the conversation to {rest}."),
                    Err(e) => format!("Cannot write {rest}: {e}"),
                }
            }
            "/load" if !rest.is_empty() => match load(rest) {
                Ok((system, messages)) => {
                    let n = messages.len();
                    (self.system, self.history) = (system, messages);
                    format!("Loaded {n} messages from {rest}.")
                }
                Err(e) => e,
            },
            _ => format!("Unknown command {line:?}; /? lists them."),
        };
        say(&format!("{reply}\n")).await;
        true
    }

    fn set(&mut self, rest: &str) -> String {
        let (key, value) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let number = |v: &str| v.trim().parse::<f64>().ok().filter(|x| x.is_finite());
        match (key, number(value)) {
            ("temperature" | "top_p", Some(x)) => {
                self.settings.insert(key.into(), json!(x));
            }
            ("top_k" | "max_tokens" | "seed", Some(x)) if x.fract() == 0.0 => {
                self.settings.insert(key.into(), json!(x as i64));
            }
            _ => {
                return format!(
                    "Usage: /set temperature|top_p|top_k|max_tokens|seed VALUE (got {rest:?})"
                )
            }
        }
        format!("Set {key} to {}.", value.trim())
    }

    /// Sends the conversation with `text` as the next user message and prints the answer as
    /// it streams; Ctrl-C stops it (what came stays in the conversation).
    async fn ask(&mut self, text: String) {
        let mut messages: Vec<Value> = self
            .system
            .iter()
            .map(|s| json!({"role": "system", "content": s}))
            .collect();
        messages.extend(self.history.iter().cloned());
        messages.push(json!({"role": "user", "content": text}));
        let mut body = json!({"model": self.model, "messages": messages, "stream": true,
                              "stream_options": {"include_usage": true}});
        if let (Value::Object(b), settings) = (&mut body, &self.settings) {
            b.extend(settings.clone());
        }
        let started = Instant::now();
        self.interrupts.clear();
        // The wait for the answer's start (the queue, the first turn's model load) can be
        // interrupted too.
        let sent = tokio::select! {
            sent = self.endpoint.post_json("/v1/chat/completions", &body) => sent,
            _ = self.interrupts.next() => {
                say("\n").await;
                return;
            }
        };
        let response = match sent {
            Ok(r) if r.status == 200 => r,
            Ok(r) => {
                let status = r.status;
                let v = r.json().await.unwrap_or(Value::Null);
                let message = v["error"]["message"].as_str().unwrap_or("no message");
                say(&format!("error ({status}): {message}\n")).await;
                return;
            }
            Err(e) => {
                say(&format!("error: {e}\n")).await;
                return;
            }
        };
        let mut events = response.events();
        let (mut answer, mut first, mut usage) = (String::new(), None, Value::Null);
        let end = loop {
            let event = tokio::select! {
                event = events.next_data() => event,
                _ = self.interrupts.next() => break End::Stopped,
            };
            let data = match event {
                Ok(Some(d)) if d != "[DONE]" => d,
                Ok(_) => break End::Done,
                Err(e) => break End::Failed(e.to_string()),
            };
            let Ok(v) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if let Some(message) = v["error"]["message"].as_str() {
                break End::Failed(message.to_string());
            }
            if let Some(piece) = v["choices"][0]["delta"]["content"].as_str() {
                if !piece.is_empty() {
                    first.get_or_insert_with(Instant::now);
                }
                answer.push_str(piece);
                say(piece).await;
            }
            if !v["usage"].is_null() {
                usage = v["usage"].clone();
            }
        };
        say("\n").await;
        match end {
            // A failed answer stays out of the conversation.
            End::Failed(message) => say(&format!("error: {message}\n")).await,
            End::Done | End::Stopped => {
                self.history.push(json!({"role": "user", "content": text}));
                self.history
                    .push(json!({"role": "assistant", "content": answer}));
                if self.verbose && matches!(end, End::Done) {
                    say(&stats(started, first, &usage)).await;
                }
            }
        }
    }
}

/// How an answer's stream ended.
enum End {
    Done,
    /// Ctrl-C: what came is kept.
    Stopped,
    Failed(String),
}

/// Ctrl-C as a stream of its own for the whole session (the first listener also keeps it
/// from ending the process).
struct Interrupts(tokio::signal::unix::Signal);

impl Interrupts {
    fn new() -> Result<Interrupts, String> {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map(Interrupts)
            .map_err(|e| format!("cannot listen for Ctrl-C: {e}"))
    }

    async fn next(&mut self) {
        self.0.recv().await;
    }

    /// Forgets a Ctrl-C that came while nothing was running (at the prompt it was told
    /// how to leave; it must not stop the next answer).
    fn clear(&mut self) {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        while let std::task::Poll::Ready(Some(())) = self.0.poll_recv(&mut cx) {}
    }
}

/// The rest of a `"""` block: lines until one ending with `"""`.
async fn read_block(
    first: &str,
    lines: &mut tokio::io::Lines<BufReader<tokio::io::Stdin>>,
) -> Result<String, String> {
    if let Some(whole) = first.trim_end().strip_suffix("\"\"\"") {
        return Ok(whole.to_string());
    }
    let mut text = first.to_string();
    loop {
        say("... ").await;
        let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? else {
            return Ok(text);
        };
        let (part, done) = match line.trim_end().strip_suffix("\"\"\"") {
            Some(part) => (part, true),
            None => (line.as_str(), false),
        };
        if !text.is_empty() || !part.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(part);
        }
        if done {
            return Ok(text);
        }
    }
}

/// What `ollama run --verbose` prints after an answer.
fn stats(started: Instant, first: Option<Instant>, usage: &Value) -> String {
    let total = started.elapsed().as_secs_f64();
    let prompt_time = first.map_or(total, |f| (f - started).as_secs_f64());
    let eval_time = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let eval = usage["completion_tokens"].as_u64().unwrap_or(0);
    let rate = |n: u64, t: f64| if t > 0.0 { n as f64 / t } else { 0.0 };
    format!(
        "total duration:       {total:.3}s\n\
         prompt eval count:    {prompt} token(s), {cached} from the cache\n\
         prompt eval duration: {prompt_time:.3}s\n\
         eval count:           {eval} token(s)\n\
         eval duration:        {eval_time:.3}s\n\
         eval rate:            {:.2} tokens/s\n",
        rate(eval.saturating_sub(1), eval_time)
    )
}

/// A conversation `/save` wrote.
fn load(path: &str) -> Result<(Option<String>, Vec<Value>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("Cannot read {path}: {e}"))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{path} is not JSON: {e}"))?;
    let messages = v["messages"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{path} holds no \"messages\" list"))?;
    Ok((v["system"].as_str().map(str::to_string), messages))
}

/// Writes `text` to the terminal at once.
async fn say(text: &str) {
    let mut out = tokio::io::stdout();
    let _ = out.write_all(text.as_bytes()).await;
    let _ = out.flush().await;
}
