//! Ollama's API on synthetic models: `/api/chat` and `/api/generate` streamed as NDJSON
//! and equal to their buffered replies and to the OpenAI routes' tokens, the final line's
//! counts and durations, options honoured or refused by name, the load/unload idiom, the
//! model routes' shapes, embeddings equal to `/v1/embeddings`, and every error as
//! `{"error": "..."}`.

use std::path::Path;
use std::time::Duration;

use ferrox_engine::synthetic::{self, build_gguf, SyntheticSpec};
use ferrox_sched::SchedulerConfig;
use ferrox_server::{AppState, ModelsConfig, ServerConfig};
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny, ScratchDir, TestServer};

fn state() -> AppState {
    let spec = SyntheticSpec {
        control_tokens: synthetic::FIM_TOKENS,
        // Room for the tool descriptions a template without tools gets in its system turn.
        context_length: 2048,
        ..tiny()
    };
    synthetic_state(&spec, SchedulerConfig::default(), ServerConfig::default())
}

fn chat(extra: Value) -> Value {
    let mut body = json!({
        "model": "synthetic",
        "messages": [{"role": "system", "content": "be brief"},
                     {"role": "user", "content": "hi there"}],
        "stream": false,
        "options": {"temperature": 0, "num_predict": 10},
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

/// A streamed reply's lines, each parsed, and its content type.
async fn lines(s: &TestServer, path: &str, body: Value) -> (u16, String, Vec<Value>) {
    let r = s.post_raw(path, body).await;
    let status = r.status;
    let kind = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = r.text().await.unwrap();
    assert!(text.ends_with('\n'), "every line ends: {text:?}");
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    (status, kind, lines)
}

/// Every line but the last is `done: false`; the last is `done: true` with the counts and
/// durations of a finished answer.
fn check_done(lines: &[Value]) -> &Value {
    let (last, rest) = lines.split_last().expect("a line");
    assert!(rest.iter().all(|l| l["done"] == false), "{lines:?}");
    assert_eq!(last["done"], true, "{last}");
    for k in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_count",
        "eval_duration",
    ] {
        assert!(last[k].is_u64(), "{k} in {last}");
    }
    assert!(last["total_duration"].as_u64() >= last["eval_duration"].as_u64());
    last
}

#[tokio::test]
async fn chat_streams_ndjson_equal_to_the_buffered_reply_and_the_openai_route() {
    let s = TestServer::start(state()).await;
    let (status, v) = s.post("/api/chat", chat(json!({}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], "synthetic");
    assert_eq!(v["message"]["role"], "assistant");
    assert_eq!(v["done_reason"], "length");
    assert_eq!(v["eval_count"], 10);
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'), "{v}");
    let text = v["message"]["content"].as_str().unwrap().to_string();
    check_done(std::slice::from_ref(&v));

    let (status, kind, streamed) = lines(&s, "/api/chat", chat(json!({"stream": true}))).await;
    assert_eq!(status, 200);
    assert_eq!(kind, "application/x-ndjson");
    let last = check_done(&streamed);
    assert_eq!(last["done_reason"], "length");
    assert_eq!(last["prompt_eval_count"], v["prompt_eval_count"]);
    let joined: String = streamed
        .iter()
        .map(|l| l["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);

    // The same tokens as the OpenAI route with the same messages and budget.
    let (_, o) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": chat(json!({}))["messages"], "max_tokens": 10, "temperature": 0}),
        )
        .await;
    assert_eq!(o["choices"][0]["message"]["content"], text);
    assert_eq!(o["usage"]["prompt_tokens"], v["prompt_eval_count"]);

    // The name with Ollama's default tag is the same model, echoed as sent.
    let (status, tagged) = s
        .post("/api/chat", chat(json!({"model": "synthetic:latest"})))
        .await;
    assert_eq!(status, 200, "{tagged}");
    assert_eq!(tagged["model"], "synthetic:latest");
    assert_eq!(tagged["message"]["content"], text);
}

#[tokio::test]
async fn generate_renders_the_template_or_takes_the_prompt_raw_and_fills_in_the_middle() {
    let s = TestServer::start(state()).await;
    let generate = |extra: Value| {
        let mut body = json!({"model": "synthetic", "prompt": "hi there", "stream": false,
                              "options": {"temperature": 0, "num_predict": 8}});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let (status, v) = s.post("/api/generate", generate(json!({}))).await;
    assert_eq!(status, 200, "{v}");
    let text = v["response"].as_str().unwrap().to_string();
    // Through the template: the chat route's answer to the same user message.
    let (_, c) = s
        .post(
            "/api/chat",
            chat(
                json!({"messages": [{"role": "user", "content": "hi there"}],
                        "options": {"temperature": 0, "num_predict": 8}}),
            ),
        )
        .await;
    assert_eq!(c["message"]["content"], text);
    let (_, kind, streamed) = lines(&s, "/api/generate", generate(json!({"stream": true}))).await;
    assert_eq!(kind, "application/x-ndjson");
    check_done(&streamed);
    let joined: String = streamed
        .iter()
        .map(|l| l["response"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);

    // Raw: the completion route's answer to the same text.
    let (_, raw) = s
        .post("/api/generate", generate(json!({"raw": true})))
        .await;
    let (_, o) = s
        .post(
            "/v1/completions",
            json!({"prompt": "hi there", "max_tokens": 8, "temperature": 0}),
        )
        .await;
    assert_eq!(raw["response"], o["choices"][0]["text"], "{raw}");

    // A suffix: the infill route's answer to the same prefix and suffix.
    let (status, fill) = s
        .post("/api/generate", generate(json!({"suffix": " end"})))
        .await;
    assert_eq!(status, 200, "{fill}");
    let (_, infill) = s
        .post(
            "/infill",
            json!({"input_prefix": "hi there", "input_suffix": " end", "prompt": "",
                   "n_predict": 8, "temperature": 0}),
        )
        .await;
    assert_eq!(fill["response"], infill["content"], "{fill} {infill}");
}

#[tokio::test]
async fn options_are_honoured_or_refused_by_name() {
    let s = TestServer::start(state()).await;
    // A seed reproduces a sampled answer; another seed gives another.
    let sampled = |seed: u64| {
        chat(json!({"options": {"temperature": 1.0, "seed": seed,
                                                       "num_predict": 12, "top_k": 40}}))
    };
    let (_, a) = s.post("/api/chat", sampled(7)).await;
    let (_, b) = s.post("/api/chat", sampled(7)).await;
    let (_, c) = s.post("/api/chat", sampled(8)).await;
    assert_eq!(a["message"]["content"], b["message"]["content"]);
    assert_ne!(a["message"]["content"], c["message"]["content"]);

    // num_ctx: a budget past it ends there; a prompt past it is refused naming it.
    let (_, v) = s.post("/api/chat", chat(json!({}))).await;
    let prompt = v["prompt_eval_count"].as_u64().unwrap();
    let (status, v) = s
        .post(
            "/api/chat",
            chat(json!({"options": {"temperature": 0, "num_predict": 100, "num_ctx": prompt + 3}})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["eval_count"].as_u64(), v["done_reason"].as_str()),
        (Some(3), Some("length"))
    );
    let (status, v) = s
        .post("/api/chat", chat(json!({"options": {"num_ctx": prompt}})))
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("options.num_ctx"),
        "{v}"
    );

    // What cannot be honoured: a 400 in Ollama's shape, naming the option.
    for (options, name) in [
        (json!({"mirostat": 2}), "options.mirostat"),
        (json!({"num_thread": 4}), "options.num_thread"),
        (json!({"temprature": 0.5}), "options.temprature"),
    ] {
        let (status, v) = s.post("/api/chat", chat(json!({"options": options}))).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v.as_object().unwrap().len(), 1, "only `error`: {v}");
        assert!(v["error"].as_str().unwrap().contains(name), "{v}");
    }
    let (status, v) = s.post("/api/chat", chat(json!({"think": true}))).await;
    assert_eq!(status, 400);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("does not support thinking"),
        "{v}"
    );
    let (status, v) = s.post("/api/chat", chat(json!({"model": "nope"}))).await;
    assert_eq!(status, 404, "{v}");
    assert!(v["error"].as_str().unwrap().contains("nope"), "{v}");
    let (status, v) = s
        .post(
            "/api/chat",
            chat(json!({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]})),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("images"), "{v}");
}

#[tokio::test]
async fn a_schema_format_validates_and_logprobs_come_per_token() {
    let s = TestServer::start(state()).await;
    let schema = json!({"type": "object",
                        "properties": {"colour": {"type": "string", "enum": ["red", "green"]}},
                        "required": ["colour"], "additionalProperties": false});
    for seed in 0..4 {
        let body = chat(
            json!({"format": schema, "options": {"temperature": 1.0, "seed": seed,
                                                              "num_predict": 60}}),
        );
        let (status, v) = s.post("/api/chat", body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["done_reason"], "stop", "{v}");
        let answer: Value = serde_json::from_str(v["message"]["content"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{e}: {v}"));
        assert!(
            ["red", "green"].contains(&answer["colour"].as_str().unwrap()),
            "{v}"
        );
    }
    // "json": any JSON object.
    let (_, v) = s
        .post(
            "/api/chat",
            chat(json!({"format": "json", "options": {"num_predict": 200}})),
        )
        .await;
    if v["done_reason"] == "stop" {
        let answer: Value = serde_json::from_str(v["message"]["content"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{e}: {v}"));
        assert!(answer.is_object(), "{v}");
    }
    let body = chat(json!({"logprobs": true, "top_logprobs": 3}));
    let (_, v) = s.post("/api/chat", body.clone()).await;
    let lp = v["logprobs"].as_array().unwrap();
    assert_eq!(lp.len(), 10, "{v}");
    assert!(lp
        .iter()
        .all(|t| t["top_logprobs"].as_array().unwrap().len() == 3));
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (_, _, ls) = lines(&s, "/api/chat", streamed).await;
    let all: Vec<&Value> = ls
        .iter()
        .flat_map(|l| l["logprobs"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(all.len(), 10);
    assert_eq!(all[0]["token"], lp[0]["token"]);
}

#[tokio::test]
async fn tools_give_the_same_answer_as_the_openai_route() {
    let s = TestServer::start(state()).await;
    let weather = json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}});
    for seed in 0..3 {
        let o = json!({"temperature": 1.0, "seed": seed, "num_predict": 16});
        let (status, v) = s
            .post("/api/chat", chat(json!({"tools": [weather], "options": o})))
            .await;
        assert_eq!(status, 200, "{v}");
        let (_, oa) = s
            .post(
                "/v1/chat/completions",
                json!({"messages": chat(json!({}))["messages"], "tools": [weather],
                       "max_tokens": 16, "temperature": 1.0, "seed": seed}),
            )
            .await;
        let m = &oa["choices"][0]["message"];
        assert_eq!(v["message"]["content"], m["content"], "{v} {oa}");
    }
    // A history in Ollama's shape: a call with object arguments, its result by name.
    let history = json!([
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]);
    let (status, v) = s
        .post(
            "/api/chat",
            chat(json!({"messages": history, "tools": [weather]})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn the_model_routes_answer_in_ollamas_shapes() {
    let s = TestServer::start(state()).await;
    let get = |path: &'static str| {
        let s = &s;
        async move {
            let (status, text) = s.get(path).await;
            assert_eq!(status, 200, "{path}: {text}");
            serde_json::from_str::<Value>(&text).unwrap()
        }
    };
    let version = get("/api/version").await;
    assert!(
        version["version"].as_str().unwrap().starts_with("0."),
        "{version}"
    );
    let tags = get("/api/tags").await;
    let m = &tags["models"][0];
    assert_eq!(
        (m["name"].as_str(), m["model"].as_str()),
        (Some("synthetic"), Some("synthetic"))
    );
    assert_eq!(m["details"]["format"], "gguf");
    assert_eq!(m["details"]["family"], "gemma3");
    assert_eq!(m["digest"].as_str().unwrap().len(), 64);
    let ps = get("/api/ps").await;
    assert_eq!(ps["models"][0]["name"], "synthetic");
    assert!(ps["models"][0]["context_length"].as_u64().unwrap() > 0);
    assert!(ps["models"][0]["expires_at"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    let (status, show) = s
        .post("/api/show", json!({"model": "synthetic:latest"}))
        .await;
    assert_eq!(status, 200, "{show}");
    let caps: Vec<&str> = show["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(caps, ["completion", "tools", "insert"], "{show}");
    let info = &show["model_info"];
    assert_eq!(info["general.architecture"], "gemma3");
    assert!(info["general.parameter_count"].as_u64().unwrap() > 0);
    assert_eq!(
        info["tokenizer.ggml.tokens"],
        Value::Null,
        "arrays only when verbose"
    );
    let (status, v) = s.post("/api/show", json!({"model": "other"})).await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = s
        .post("/api/create", json!({"model": "x", "from": "synthetic"}))
        .await;
    assert_eq!(status, 501, "{v}");
    assert!(v["error"].as_str().unwrap().contains("--alias"), "{v}");
}

#[tokio::test]
async fn embeddings_equal_the_openai_routes() {
    let s = TestServer::start(state()).await;
    let (status, v) = s
        .post(
            "/api/embed",
            json!({"model": "synthetic", "input": ["a b", "c"]}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, o) = s
        .post("/v1/embeddings", json!({"input": ["a b", "c"]}))
        .await;
    for i in 0..2 {
        assert_eq!(v["embeddings"][i], o["data"][i]["embedding"]);
    }
    assert_eq!(v["prompt_eval_count"], o["usage"]["prompt_tokens"]);
    let (_, old) = s
        .post(
            "/api/embeddings",
            json!({"model": "synthetic", "prompt": "c"}),
        )
        .await;
    assert_eq!(old["embedding"], o["data"][1]["embedding"]);
}

/// A fresh directory with one model file in it (`m.gguf`), removed when the test ends.
fn model_dir(test: &str) -> ScratchDir {
    let d = ScratchDir::new(&format!("ollama-{test}"));
    std::fs::write(d.join("m.gguf"), build_gguf(&tiny())).unwrap();
    d
}

async fn file_server(path: &Path) -> TestServer {
    let state = AppState::new(ServerConfig::default(), ModelsConfig::default());
    state.models.add("m", path.to_path_buf()).unwrap();
    state.set_ready();
    TestServer::start(state).await
}

async fn loaded(s: &TestServer) -> Vec<String> {
    let (_, text) = s.get("/api/ps").await;
    let v: Value = serde_json::from_str(&text).unwrap();
    v["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn an_empty_request_loads_and_keep_alive_zero_unloads() {
    let dir = model_dir("lifecycle");
    let s = file_server(&dir.join("m.gguf")).await;
    // Listed and shown from the file's header before it is loaded.
    let (_, tags) = s.get("/api/tags").await;
    assert!(tags.contains("\"name\":\"m\""), "{tags}");
    let (status, show) = s.post("/api/show", json!({"model": "m"})).await;
    assert_eq!(status, 200, "{show}");
    assert_eq!(show["model_info"]["tokenizer.ggml.tokens"], Value::Null);
    let (_, verbose) = s
        .post("/api/show", json!({"model": "m", "verbose": true}))
        .await;
    let tokens = &verbose["model_info"]["tokenizer.ggml.tokens"];
    assert_eq!(
        tokens.as_array().map(Vec::len),
        Some(tiny().n_vocab),
        "{verbose}"
    );
    assert!(loaded(&s).await.is_empty(), "show loads nothing");
    // Unloading a model that is not loaded does not load it.
    let (status, v) = s
        .post("/api/generate", json!({"model": "m", "keep_alive": 0}))
        .await;
    assert_eq!(
        (status, v["done_reason"].as_str()),
        (200, Some("unload")),
        "{v}"
    );
    assert!(loaded(&s).await.is_empty());
    let (status, v) = s
        .post("/api/chat", json!({"model": "m", "messages": []}))
        .await;
    assert_eq!(
        (status, v["done_reason"].as_str()),
        (200, Some("load")),
        "{v}"
    );
    assert_eq!(v["done"], true);
    assert_eq!(loaded(&s).await, ["m"]);
    let (status, v) = s
        .post("/api/chat", json!({"model": "m", "keep_alive": 0}))
        .await;
    assert_eq!(
        (status, v["done_reason"].as_str()),
        (200, Some("unload")),
        "{v}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !loaded(&s).await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "still loaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A stand-in hub with one repository holding `file`: the file API and its downloads.
async fn stand_in_hub(file: &'static str, bytes: Vec<u8>) -> String {
    use axum::routing::get;
    use sha2::{Digest, Sha256};
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let listing = json!([{"type": "file", "path": file, "size": bytes.len(),
                          "lfs": {"oid": sha, "size": bytes.len()}}]);
    let app = axum::Router::new()
        .route(
            "/api/models/o/tiny-GGUF/tree/main",
            get(move || async move { axum::Json(listing) }),
        )
        .route(
            &format!("/o/tiny-GGUF/resolve/main/{file}"),
            get(move || async move { bytes }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_pull_by_name_fetches_registers_and_serves_the_model() {
    let endpoint = stand_in_hub("tiny-Q8_0.gguf", build_gguf(&tiny())).await;
    let dir = ScratchDir::new("ollama-pulled");
    let config = ServerConfig {
        hub_endpoint: Some(endpoint),
        pull_dir: Some(dir.to_path_buf()),
        ..ServerConfig::default()
    };
    let state = AppState::new(config, ModelsConfig::default());
    let models = model_dir("pull");
    state.models.add("m", models.join("m.gguf")).unwrap();
    state.set_ready();
    let s = TestServer::start(state).await;
    let name = "hf.co/o/tiny-GGUF:Q8_0";
    let (status, kind, progress) = lines(&s, "/api/pull", json!({"model": name})).await;
    assert_eq!((status, kind.as_str()), (200, "application/x-ndjson"));
    let statuses: Vec<&str> = progress
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.first(), Some(&"pulling manifest"), "{progress:?}");
    assert_eq!(statuses.last(), Some(&"success"), "{progress:?}");
    assert!(
        statuses.contains(&"verifying sha256 digest"),
        "{progress:?}"
    );
    let pulled = progress
        .iter()
        .rev()
        .find(|l| l["digest"].is_string())
        .unwrap();
    assert_eq!(pulled["completed"], pulled["total"], "{pulled}");
    assert!(dir.join("hub/o/tiny-GGUF/tiny-Q8_0.gguf").is_file());
    // Registered under the name it was pulled by: it serves.
    let (status, v) = s
        .post(
            "/api/chat",
            json!({"model": name, "stream": false, "options": {"temperature": 0, "num_predict": 3},
                   "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!((status, v["eval_count"].as_u64()), (200, Some(3)), "{v}");
    // Again: nothing to fetch. A name that is neither: a 400 naming it.
    let (status, v) = s
        .post("/api/pull", json!({"model": name, "stream": false}))
        .await;
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("success")),
        "{v}"
    );
    let (status, v) = s.post("/api/pull", json!({"model": "llama3"})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("llama3"), "{v}");
}
