//! Structured output on every surface that takes it (chat and completions `response_format`,
//! Responses `text.format`, llama.cpp `json_schema` and Lark `grammar`): over many seeded
//! samples every output parses and validates against its schema (checked with an independent
//! validator), streamed == buffered, and every schema or grammar that cannot be enforced is a
//! 400 naming the parameter before anything is generated — never a 200 with free text. On a
//! synthetic model (random weights: only the constraint makes its output JSON) and on the
//! default model.

use ferrox_sched::SchedulerConfig;
use ferrox_server::{AppState, ServerConfig};
use serde_json::{json, Value};

use crate::common::{
    default_model_state, streamed_text, synthetic_state, text_of, tiny, TestServer,
};

fn state() -> AppState {
    synthetic_state(&tiny(), SchedulerConfig::default(), ServerConfig::default())
}

/// Bounded, so a random model finishes it well inside the budget.
pub fn person() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": ["ann", "bob", "cy"]},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "age", "ok"],
        "additionalProperties": false,
    })
}

fn valid(schema: &Value, text: &str) -> Result<Value, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e}): {text:?}"))?;
    let validator = jsonschema::validator_for(schema).expect("the test's schema compiles");
    if let Err(e) = validator.validate(&v) {
        return Err(format!("{text:?} does not validate: {e}"));
    }
    Ok(v)
}

fn response_format(schema: &Value) -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}})
}

async fn check_samples(s: &TestServer, route: &str, base: Value, seeds: u64) {
    for seed in 0..seeds {
        let mut body = base.clone();
        body["seed"] = json!(seed);
        let (status, v) = s.post(route, body).await;
        assert_eq!(status, 200, "{v}");
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "stop", "seed {seed}: {v}");
        if let Err(e) = valid(&person(), &text_of(&v)) {
            panic!("seed {seed} on {route}: {e}");
        }
    }
}

#[tokio::test]
async fn every_sample_of_a_random_model_validates_on_chat_and_completions() {
    let s = TestServer::start(state()).await;
    let chat = json!({
        "messages": [{"role": "user", "content": "who?"}], "max_tokens": 64,
        "temperature": 1.0, "response_format": response_format(&person()),
    });
    check_samples(&s, "/v1/chat/completions", chat, 24).await;
    let completion = json!({
        "prompt": "a person:", "max_tokens": 64, "temperature": 1.0,
        "response_format": response_format(&person()),
    });
    check_samples(&s, "/v1/completions", completion, 24).await;
    // json_object: any object. Unbounded, so a sample may run out of tokens; every one that
    // stops must be an object, and the budget is large enough that some do (a check that
    // never ran would pass otherwise).
    let mut stopped = 0;
    for seed in 0..12 {
        let any = json!({
            "prompt": "x", "max_tokens": 160, "temperature": 1.0, "seed": seed,
            "response_format": {"type": "json_object"},
        });
        let (status, v) = s.post("/v1/completions", any).await;
        assert_eq!(status, 200, "{v}");
        if v["choices"][0]["finish_reason"] == "stop" {
            let out: Value = serde_json::from_str(&text_of(&v))
                .unwrap_or_else(|e| panic!("seed {seed}: json_object output ({e}): {v}"));
            assert!(out.is_object(), "{out}");
            stopped += 1;
        }
    }
    assert!(
        stopped >= 3,
        "only {stopped} of 12 json_object samples finished"
    );
}

#[tokio::test]
async fn streamed_equals_buffered_and_n_choices_each_validate() {
    let s = TestServer::start(state()).await;
    let body = json!({
        "messages": [{"role": "user", "content": "who?"}], "max_tokens": 64, "seed": 11,
        "temperature": 1.0, "n": 3, "response_format": response_format(&person()),
    });
    let (_, whole) = s.post("/v1/chat/completions", body.clone()).await;
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (_, events) = s.stream("/v1/chat/completions", streamed).await;
    for i in 0..3 {
        let text = whole["choices"][i]["message"]["content"].as_str().unwrap();
        valid(&person(), text).unwrap();
        assert_eq!(streamed_text(&events, i as u64), text, "choice {i}");
    }
}

#[tokio::test]
async fn responses_and_llama_cpp_take_their_own_spellings() {
    let s = TestServer::start(state()).await;
    let format = json!({"type": "json_schema", "name": "person", "schema": person()});
    let (status, v) = s
        .post(
            "/v1/responses",
            json!({"input": "who?", "max_output_tokens": 64, "seed": 2, "text": {"format": format}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    valid(
        &person(),
        v["output"][0]["content"][0]["text"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(v["text"]["format"]["type"], "json_schema");
    for seed in 0..8 {
        let (_, v) = s
            .post(
                "/completion",
                json!({"prompt": "p", "n_predict": 64, "seed": seed, "json_schema": person()}),
            )
            .await;
        assert_eq!(v["stop_type"], "eos", "{v}");
        valid(&person(), v["content"].as_str().unwrap()).unwrap();
    }
    let lark = "%llguidance {}\nstart: \"yes\" | \"no\"";
    let (_, v) = s
        .post(
            "/completion",
            json!({"prompt": "p", "n_predict": 8, "grammar": lark}),
        )
        .await;
    let c = v["content"].as_str().unwrap();
    assert!(c == "yes" || c == "no", "{v}");
}

/// llama.cpp's grammar format: every sample of a random model, under each grammar of a
/// table, is in the grammar's language, written again as a regex to check it.
#[tokio::test]
async fn every_sample_under_a_gbnf_grammar_is_in_its_language() {
    let s = TestServer::start(state()).await;
    let table = [
        ("root ::= \"yes\" | \"no\"", r"yes|no"),
        (
            "root ::= \"[\" num (\",\" num){0,3} \"]\"\nnum ::= [1-9] [0-9]{0,2}",
            r"\[[1-9][0-9]{0,2}(,[1-9][0-9]{0,2}){0,3}\]",
        ),
        (
            "# an object with one field\nroot ::= \"{\" ws \"\\\"name\\\":\" ws str ws \"}\"\n\
             str ::= \"\\\"\" [a-z]{1,8} \"\\\"\"\nws ::= [ \\t]?",
            r#"\{[ \t]?"name":[ \t]?"[a-z]{1,8}"[ \t]?\}"#,
        ),
        ("root ::= \"<\" .{2} \">\"", r"(?s)<.{2}>"),
        ("root ::= \"'\" [^'\\n]{1,5} \"'\"", r"'[^'\n]{1,5}'"),
        (
            "root ::= Word-Part+\nWord-Part ::= [A-Z] [a-z]?",
            r"([A-Z][a-z]?)+",
        ),
    ];
    for (gbnf, language) in table {
        let re = regex::Regex::new(&format!("^(?:{language})$")).unwrap();
        let mut finished = 0;
        for seed in 0..6 {
            let (status, v) = s
                .post(
                    "/completion",
                    json!({"prompt": "p", "n_predict": 64, "seed": seed, "grammar": gbnf}),
                )
                .await;
            assert_eq!(status, 200, "{gbnf}: {v}");
            let content = v["content"].as_str().unwrap();
            // A grammar whose language is unbounded may run out of tokens mid-way.
            if v["stop_type"] == "eos" {
                assert!(re.is_match(content), "{gbnf:?} seed {seed}: {content:?}");
                finished += 1;
            } else {
                assert!(!content.is_empty(), "{gbnf:?} seed {seed}: {v}");
            }
        }
        // The language check ran: some samples reached the grammar's end.
        assert!(finished >= 1, "{gbnf:?}: no sample of 6 finished");
    }
}

#[tokio::test]
async fn what_cannot_be_enforced_is_refused_before_generating() {
    let s = TestServer::start(state()).await;
    let bad_schemas = [
        json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}),
        json!({"type": "strin"}),
        json!({"type": "string", "pattern": "(unclosed"}),
        json!({"type": "integer", "minimum": 5, "maximum": 1}),
        json!(7),
    ];
    let before = s.status().requests_admitted;
    for schema in &bad_schemas {
        let body =
            json!({"prompt": "x", "max_tokens": 8, "response_format": response_format(schema)});
        let (status, v) = s.post("/v1/completions", body).await;
        assert_eq!(status, 400, "{schema}: {v}");
        let param = v["error"]["param"].as_str().unwrap();
        assert!(param.starts_with("response_format"), "{v}");
        let (status, v) = s
            .post("/completion", json!({"prompt": "x", "json_schema": schema}))
            .await;
        assert_eq!(
            (status, v["error"]["param"].as_str()),
            (400, Some("json_schema")),
            "{v}"
        );
    }
    let (status, v) = s
        .post(
            "/completion",
            json!({"prompt": "x", "grammar": "%llguidance {}\nstart: nope"}),
        )
        .await;
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("grammar")),
        "{v}"
    );
    let (status, v) = s
        .post(
            "/completion",
            json!({"prompt": "x", "grammar": "root ::= \"a"}),
        )
        .await;
    assert_eq!(
        (status, v["error"]["param"].as_str()),
        (400, Some("grammar")),
        "{v}"
    );
    assert_eq!(
        s.status().requests_admitted,
        before,
        "a refused request reached the batch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_model_emits_schema_valid_json_every_time() {
    let Some(state) = default_model_state() else {
        return;
    };
    let s = TestServer::start(state).await;
    let chat = json!({
        "messages": [{"role": "user", "content": "Describe a person as JSON."}],
        "max_tokens": 64, "temperature": 0.8,
        "response_format": response_format(&person()),
    });
    check_samples(&s, "/v1/chat/completions", chat, 12).await;
}
