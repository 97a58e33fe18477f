//! Speculative decoding through the HTTP API: `speculative` on every protocol changes how
//! many steps a reply takes, never the reply; the drafted tokens are reported in the usage;
//! a bad value is a 400 naming the parameter.

use ferrox_sched::{SchedulerConfig, SpecConfig};
use ferrox_server::ServerConfig;
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
