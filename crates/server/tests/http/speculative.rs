//! Speculative decoding through the HTTP API: `speculative` on every protocol changes how
//! many steps a reply takes, never the reply; the drafted tokens are reported in the usage;
//! a bad value is a 400 naming the parameter. A draft model (`--model-draft`) is one more
//! source of guesses under the same rule.

use std::sync::Arc;

use ferrox_engine::synthetic::{self, SyntheticSpec};
use ferrox_engine::Arch;
use ferrox_sched::{SchedulerConfig, SpecConfig, SpecKind};
use ferrox_server::{AppState, ModelsConfig, ServerConfig};
use serde_json::{json, Value};

use crate::common::{synthetic_state, tiny, TestServer};

/// A server that verifies every draft prompt lookup finds (`adaptive: false`): what a request
/// could be drafted is always drafted, whatever the step timings.
async fn server() -> TestServer {
    let sched = SchedulerConfig {
        speculation: SpecConfig {
            adaptive: false,
            ..SpecConfig::default()
        },
        ..SchedulerConfig::default()
    };
    TestServer::start(synthetic_state(&tiny(), sched, ServerConfig::default())).await
}

/// Prompts that repeat themselves, so that the random-weight model's output (which loops)
/// and the prompt give prompt lookup something to find.
const PROMPTS: [&str; 3] = [
    "one two three four one two three four one two three four one two",
    "the cat sat on the mat and the cat sat on the mat and the cat",
    "a b c a b c a b c a b c a b c a b c a b c",
];

fn with(mut body: Value, extra: &Value) -> Value {
    if let Some(extra) = extra.as_object() {
        body.as_object_mut().unwrap().extend(extra.clone());
    }
    body
}

#[tokio::test]
async fn every_protocol_answers_the_same_with_and_without_speculation() {
    let s = server().await;
    let mut accepted = 0;
    for prompt in PROMPTS {
        let messages = json!([{"role": "user", "content": prompt}]);
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "/v1/completions",
                json!({"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": true,
                       "logprobs": 3}),
                "/choices/0/text",
            ),
            (
                "/v1/chat/completions",
                json!({"messages": messages, "max_tokens": 24, "temperature": 0.9, "seed": 5}),
                "/choices/0/message/content",
            ),
            (
                "/completion",
                json!({"prompt": prompt, "n_predict": 24, "temperature": 0, "ignore_eos": true}),
                "/content",
            ),
            (
                "/v1/messages",
                json!({"model": "synthetic", "messages": messages, "max_tokens": 24,
                       "temperature": 0}),
                "/content/0/text",
            ),
            (
                "/v1/responses",
                json!({"input": prompt, "max_output_tokens": 24, "temperature": 0}),
                "/output/0/content/0/text",
            ),
            (
                "/api/generate",
                json!({"model": "synthetic", "prompt": prompt, "stream": false,
                       "options": {"temperature": 0, "num_predict": 24}}),
                "/response",
            ),
        ];
        for (path, body, text) in cases {
            let (status, plain) = s
                .post(path, with(body.clone(), &json!({"speculative": false})))
                .await;
            assert_eq!(status, 200, "{path}: {plain}");
            let (status, spec) = s
                .post(path, with(body, &json!({"speculative": {"n_max": 8}})))
                .await;
            assert_eq!(status, 200, "{path}: {spec}");
            assert_eq!(spec.pointer(text), plain.pointer(text), "{path}");
            assert!(
                plain.pointer(text).is_some(),
                "{path}: no {text} in {plain}"
            );
            if path.starts_with("/v1/c") {
                let details = "/usage/completion_tokens_details";
                assert_eq!(
                    plain.pointer(details),
                    Some(
                        &json!({"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0})
                    ),
                    "{path}: speculation off drafts nothing"
                );
                assert_eq!(
                    spec["choices"][0]["logprobs"],
                    plain["choices"][0]["logprobs"]
                );
                accepted += spec
                    .pointer(&format!("{details}/accepted_prediction_tokens"))
                    .and_then(Value::as_u64)
                    .unwrap();
            }
            if path == "/completion" {
                assert_eq!(plain["timings"]["draft_n"], 0, "{plain}");
                assert_eq!(spec["generation_settings"]["speculative.n_max"], 8);
            }
        }
    }
    assert!(accepted > 0, "no drafted token was ever accepted");
}

#[tokio::test]
async fn bad_speculative_values_are_400_naming_the_parameter() {
    let s = server().await;
    let cases = [
        (json!({"speculative": "yes"}), "speculative"),
        (json!({"speculative": {"n_max": 1000}}), "speculative.n_max"),
        (json!({"speculative": {"p_min": 2.0}}), "speculative.p_min"),
        (json!({"speculative": {"draft": 4}}), "speculative.draft"),
        (
            json!({"speculative.n_min": 9, "speculative.n_max": 2}),
            "speculative.n_min",
        ),
        // Above the server's n_max (16), which the request did not override.
        (json!({"speculative": {"n_min": 20}}), "speculative.n_min"),
    ];
    for (extra, param) in cases {
        for path in ["/v1/chat/completions", "/completion"] {
            let body = if path == "/completion" {
                json!({"prompt": "hi", "n_predict": 2})
            } else {
                json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
            };
            let (status, v) = s.post(path, with(body, &extra)).await;
            assert_eq!(status, 400, "{path} {extra}: {v}");
            let text = v.to_string();
            assert!(
                text.contains(param),
                "{path} {extra}: {v} does not name {param}"
            );
        }
    }
}

/// A server over the tiny model with `draft` (a GGUF written to a file) as its draft model,
/// verifying every guess (`adaptive: false`).
fn drafted_state(draft: &SyntheticSpec, name: &str) -> Result<AppState, String> {
    let path =
        std::env::temp_dir().join(format!("ferrox-draft-{}-{name}.gguf", std::process::id()));
    std::fs::write(&path, synthetic::build_gguf(draft)).unwrap();
    let models = ModelsConfig {
        scheduler: SchedulerConfig {
            speculation: SpecConfig {
                kind: SpecKind::Draft,
                adaptive: false,
                n_max: 6,
                ..SpecConfig::default()
            },
            ..SchedulerConfig::default()
        },
        draft: Some(path.clone()),
        ..ModelsConfig::default()
    };
    let state = AppState::new(ServerConfig::default(), models);
    let model = synthetic::load(&tiny(), 1).expect("synthetic model loads");
    let served = state.models.insert("synthetic", Arc::new(model));
    let _ = std::fs::remove_file(&path);
    served?;
    state.set_ready();
    Ok(state)
}

/// Greedy and seeded replies over every protocol, with and without speculation: the same
/// text, and the drafted and accepted counts from the usage of the chat and completions
/// replies.
async fn same_with_and_without(s: &TestServer) -> (u64, u64) {
    let (mut drafted, mut accepted) = (0, 0);
    for prompt in PROMPTS {
        let messages = json!([{"role": "user", "content": prompt}]);
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "/v1/completions",
                json!({"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": true,
                       "logprobs": 3}),
                "/choices/0/text",
            ),
            (
                "/v1/chat/completions",
                json!({"messages": messages, "max_tokens": 24, "temperature": 0, "ignore_eos": true}),
                "/choices/0/message/content",
            ),
            (
                "/v1/messages",
                json!({"model": "synthetic", "messages": messages, "max_tokens": 24,
                       "temperature": 0}),
                "/content/0/text",
            ),
            (
                "/completion",
                json!({"prompt": prompt, "n_predict": 24, "temperature": 0.9, "seed": 3}),
                "/content",
            ),
            (
                "/api/generate",
                json!({"model": "synthetic", "prompt": prompt, "stream": false,
                       "options": {"temperature": 0, "num_predict": 24}}),
                "/response",
            ),
        ];
        for (path, body, text) in cases {
            let (status, plain) = s
                .post(path, with(body.clone(), &json!({"speculative": false})))
                .await;
            assert_eq!(status, 200, "{path}: {plain}");
            let (status, spec) = s.post(path, body).await;
            assert_eq!(status, 200, "{path}: {spec}");
            assert!(
                plain.pointer(text).is_some(),
                "{path}: no {text} in {plain}"
            );
            assert_eq!(spec.pointer(text), plain.pointer(text), "{path}");
            if path.starts_with("/v1/c") {
                assert_eq!(
                    spec["choices"][0]["logprobs"],
                    plain["choices"][0]["logprobs"]
                );
                let details = &spec["usage"]["completion_tokens_details"];
                let (a, r) = (
                    details["accepted_prediction_tokens"].as_u64().unwrap(),
                    details["rejected_prediction_tokens"].as_u64().unwrap(),
                );
                accepted += a;
                drafted += a + r;
            }
        }
    }
    (drafted, accepted)
}

/// A draft model of the same vocabulary but other weights: its guesses are verified, and
/// every protocol's reply is the plain one.
#[tokio::test]
async fn a_draft_model_changes_no_reply_on_any_protocol() {
    let other = SyntheticSpec {
        context_length: 512,
        ..SyntheticSpec::tiny(Arch::Gemma3, 99)
    };
    let s = TestServer::start(drafted_state(&other, "other").unwrap()).await;
    let (drafted, _) = same_with_and_without(&s).await;
    assert!(drafted > 20, "too few guesses verified: {drafted}");
}

/// The model drafting for itself: every greedy guess is right, so every one the chat and
/// completions replies verified was accepted.
#[tokio::test]
async fn a_model_drafting_for_itself_has_every_greedy_guess_accepted() {
    let s = TestServer::start(drafted_state(&tiny(), "self").unwrap()).await;
    let (drafted, accepted) = same_with_and_without(&s).await;
    assert!(drafted > 20, "too few guesses verified: {drafted}");
    assert_eq!(accepted, drafted);
}

/// A draft model whose vocabulary differs is refused when the model starts, saying why.
#[test]
fn a_draft_of_another_vocabulary_is_refused_by_name() {
    let other = SyntheticSpec {
        n_vocab: 300,
        ..tiny()
    };
    let err = drafted_state(&other, "vocab").err().expect("refused");
    assert!(
        err.contains("vocabulary differs") && err.contains("300"),
        "{err}"
    );
}
