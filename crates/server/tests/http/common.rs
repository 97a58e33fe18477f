//! A real server on a loopback port for each test, over a synthetic random-weight model (fast)
//! or the default model (shared by the tests that use it; its scheduler is a thread, so it
//! outlives each test's runtime).

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ferrox_engine::synthetic::{self, SyntheticSpec};
use ferrox_engine::{Arch, Model};
use ferrox_sched::{SchedulerConfig, SchedulerStatus};
use ferrox_server::client::{Endpoint, Response};
use ferrox_server::{AppState, ModelsConfig, ServerConfig};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A fresh directory under the system's temp directory for one test's files, removed with
/// everything in it when the test lets go of it (tests that write model files would
/// otherwise leave tens of megabytes behind on every run).
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// `ferrox-{name}-{pid}` under the temp directory, emptied if a killed run left it.
    pub fn new(name: &str) -> ScratchDir {
        let d = std::env::temp_dir().join(format!("ferrox-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        ScratchDir(d)
    }
}

impl Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small Gemma 3 shaped model: microseconds a token.
pub fn tiny() -> SyntheticSpec {
    SyntheticSpec {
        context_length: 512,
        ..SyntheticSpec::tiny(Arch::Gemma3, 7)
    }
}

/// A wider model with a long context, slow enough (about a millisecond a token) that a
/// long request is still running when a test acts on it.
pub fn slow() -> SyntheticSpec {
    SyntheticSpec {
        n_embd: 256,
        n_ff: 1024,
        n_head: 8,
        n_head_kv: 2,
        head_dim: 32,
        n_layer: 6,
        n_vocab: 2048,
        context_length: 16384,
        ..SyntheticSpec::tiny(Arch::Gemma3, 11)
    }
}

/// A server over the tiny synthetic model with every default.
pub async fn tiny_server() -> TestServer {
    TestServer::start(synthetic_state(
        &tiny(),
        SchedulerConfig::default(),
        ServerConfig::default(),
    ))
    .await
}

/// A ready state over a synthetic model.
pub fn synthetic_state(
    spec: &SyntheticSpec,
    sched: SchedulerConfig,
    server: ServerConfig,
) -> AppState {
    let model = synthetic::load(spec, 1).expect("synthetic model loads");
    ready_state(model, Path::new("synthetic.gguf"), sched, server)
}

pub fn ready_state(
    model: Model,
    path: &Path,
    sched: SchedulerConfig,
    server: ServerConfig,
) -> AppState {
    let models = ModelsConfig {
        scheduler: sched,
        ..ModelsConfig::default()
    };
    let state = AppState::new(server, models);
    let id = path.file_stem().unwrap().to_string_lossy();
    state
        .models
        .insert(&id, Arc::new(model))
        .expect("served starts");
    state.set_ready();
    state
}

/// The default model's state, loaded once for every test that uses it; `None` (and a note)
/// if the model is not on disk.
pub fn default_model_state() -> Option<AppState> {
    static STATE: OnceLock<Option<AppState>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let path = ferrox_engine::cache::model_for_tests()?;
            let model = Model::load(&path, 2).expect("default model loads");
            Some(ready_state(
                model,
                &path,
                SchedulerConfig::default(),
                ServerConfig::default(),
            ))
        })
        .clone()
}

pub struct TestServer {
    pub endpoint: Endpoint,
    pub state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Serves `state` on a free loopback port.
    pub async fn start(state: AppState) -> TestServer {
        Self::start_with_grace(state, Duration::from_secs(10)).await
    }

    pub async fn start_with_grace(state: AppState, grace: Duration) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = Endpoint::from_addr(listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(ferrox_server::run(
            listener,
            state.clone(),
            async {
                let _ = stopped.await;
            },
            grace,
        ));
        TestServer {
            endpoint,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Sends the shutdown signal; the handle resolves when the server has stopped.
    pub fn trigger_shutdown(&mut self) -> JoinHandle<std::io::Result<()>> {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap()
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .endpoint
            .post_json(path, &body)
            .await
            .expect("request sent");
        let status = r.status;
        let text = r.text().await.expect("body read");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    pub async fn post_raw(&self, path: &str, body: Value) -> Response {
        self.endpoint
            .post_json(path, &body)
            .await
            .expect("request sent")
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self.endpoint.get(path).await.expect("request sent");
        let status = r.status;
        (status, r.text().await.expect("body read"))
    }

    /// A streaming request's events: each `data` parsed as JSON, `[DONE]` as the string.
    pub async fn stream(&self, path: &str, body: Value) -> (u16, Vec<Value>) {
        let r = self.post_raw(path, body).await;
        let status = r.status;
        let mut events = r.events();
        let mut out = Vec::new();
        while let Some(data) = events.next_data().await.expect("event stream") {
            out.push(serde_json::from_str(&data).unwrap_or(Value::String(data)));
        }
        (status, out)
    }

    /// A streaming request's events with their names: `(event, data as JSON)`.
    pub async fn named_stream(&self, path: &str, body: Value) -> (u16, Vec<(String, Value)>) {
        let r = self.post_raw(path, body).await;
        let status = r.status;
        let mut events = r.events();
        let mut out = Vec::new();
        while let Some(e) = events.next_event().await.expect("event stream") {
            let data = serde_json::from_str(&e.data).unwrap_or(Value::String(e.data));
            out.push((e.event.unwrap_or_default(), data));
        }
        (status, out)
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let r = self
            .endpoint
            .send(axum::http::Method::DELETE, path, None)
            .await
            .expect("request sent");
        let status = r.status;
        let text = r.text().await.expect("body read");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub fn status(&self) -> SchedulerStatus {
        self.state.served().unwrap().scheduler.status()
    }

    /// Polls the scheduler status until `done` holds (true) or `timeout` passes (false).
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&SchedulerStatus) -> bool,
    ) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if done(&self.status()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        done(&self.status())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The text of a completions or chat reply's first choice.
pub fn text_of(reply: &Value) -> String {
    let c = &reply["choices"][0];
    c["text"]
        .as_str()
        .or_else(|| c["message"]["content"].as_str())
        .expect("a choice with text")
        .to_string()
}

/// The concatenated text of a stream's chunks for choice `index`.
pub fn streamed_text(events: &[Value], index: u64) -> String {
    events
        .iter()
        .filter_map(|e| e["choices"].as_array())
        .flatten()
        .filter(|c| c["index"] == index)
        .filter_map(|c| {
            c["text"]
                .as_str()
                .or_else(|| c["delta"]["content"].as_str())
        })
        .collect()
}
