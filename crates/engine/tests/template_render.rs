//! Chat templates: builtin formats byte for byte, Jinja templates from strings (with the
//! Python-style helpers real templates use), typed errors, and the default model's fallback.

use ferrox_engine::template::{BuiltinFormat, ChatMessage, ChatTemplate, TemplateError};
use ferrox_engine::tokenizer::Tokenizer;

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "You are a concise assistant."),
        ChatMessage::new("user", "What is the capital of France?"),
        ChatMessage::new("assistant", "Paris."),
        ChatMessage::new("user", "And of Italy?"),
    ]
}

/// The two strings of `shared/golden/gemma3-270m/README.md` ("Chat template note").
const GEMMA_GOLDEN: &str = "<start_of_turn>user\nYou are a concise assistant.\n\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\nParis.<end_of_turn>\n<start_of_turn>user\nAnd of Italy?<end_of_turn>\n<start_of_turn>model\n";
const CHATML_GOLDEN: &str = "<|im_start|>system\nYou are a concise assistant.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n<|im_start|>assistant\n";

#[test]
fn gemma_format_matches_the_golden_readme() {
    let t = ChatTemplate::builtin(BuiltinFormat::Gemma);
    assert_eq!(t.render(&conversation(), true).unwrap(), GEMMA_GOLDEN);
    assert_eq!(t.stop_strings(), ["<end_of_turn>"]);
    // Without the generation prompt the last turn is closed and nothing is opened.
    let closed = t.render(&conversation(), false).unwrap();
    assert_eq!(
        closed,
        GEMMA_GOLDEN.strip_suffix("<start_of_turn>model\n").unwrap()
    );
}

#[test]
fn gemma_format_trims_and_merges_system_text() {
    let t = ChatTemplate::builtin(BuiltinFormat::Gemma);
    let msgs = vec![
        ChatMessage::new("system", "  Be brief.\n"),
        ChatMessage::new("user", "\nHi \t"),
    ];
    assert_eq!(
        t.render(&msgs, true).unwrap(),
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    );
    // A system message with no user turn after it leaves no trace.
    assert_eq!(
        t.render(&[ChatMessage::new("system", "x")], false).unwrap(),
        ""
    );
}

#[test]
fn chatml_format_matches_the_golden_readme() {
    let t = ChatTemplate::builtin(BuiltinFormat::ChatMl);
    assert_eq!(t.render(&conversation(), true).unwrap(), CHATML_GOLDEN);
    assert_eq!(t.stop_strings(), ["<|im_end|>"]);
}

#[test]
fn llama_formats() {
    let msgs = vec![
        ChatMessage::new("system", "S"),
        ChatMessage::new("user", " U "),
        ChatMessage::new("assistant", "A"),
    ];
    let t = ChatTemplate::builtin(BuiltinFormat::Llama3);
    assert_eq!(
        t.render(&msgs, true).unwrap(),
        "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    let t = ChatTemplate::builtin(BuiltinFormat::Llama2);
    let mut msgs = msgs;
    msgs.push(ChatMessage::new("user", "again"));
    assert_eq!(
        t.render(&msgs, true).unwrap(),
        "[INST] <<SYS>>\nS\n<</SYS>>\n\n U  [/INST]A</s>[INST] again [/INST]"
    );
}

/// A Hugging Face style template using what real ones use: `raise_exception`, `.strip()`,
/// `.startswith()`, `namespace`, `loop` variables, `bos_token`, `tojson`, `trim_blocks`.
const HF_STYLE: &str = r#"{{ bos_token }}
{% set ns = namespace(system='') %}
{% for message in messages %}
    {% if message['role'] == 'system' %}
        {% set ns.system = message['content'].strip() %}
    {% elif (message['role'] == 'user') != (loop.index0 % 2 == (1 if ns.system else 0)) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% else %}
<|{{ message['role'] }}|>{% if loop.index0 == 1 and ns.system %}{{ ns.system }} {% endif %}{{ message['content'].strip() }}{% if message['content'].startswith('Paris') %} (city){% endif %}

    {% endif %}
{% endfor %}
{% if add_generation_prompt %}<|assistant|>{% endif %}
{{ {"n": messages|length}|tojson }}"#;

#[test]
fn jinja_template_from_a_string_renders() {
    let t = ChatTemplate::from_jinja(HF_STYLE, "<s>", "</s>").unwrap();
    assert!(t.builtin_format().is_none());
    assert_eq!(t.stop_strings(), ["</s>"]);
    let out = t.render(&conversation(), true).unwrap();
    assert_eq!(
        out,
        "<s>\n<|user|>You are a concise assistant. What is the capital of France?\n<|assistant|>Paris. (city)\n<|user|>And of Italy?\n<|assistant|>{\"n\": 4}"
    );
}

#[test]
fn tojson_follows_python_json_dumps() {
    let src = r#"{{ {"name": "get_weather", "parameters": {"city": "Zürich", "days": [1, 2.5, 3.0], "ok": true, "none": none}}|tojson }}|{{ [1, {"a": "x\ny"}]|tojson(indent=2) }}|{{ {}|tojson }}"#;
    let t = ChatTemplate::from_jinja(src, "", "").unwrap();
    assert_eq!(
        t.render(&[], false).unwrap(),
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Zürich\", \"days\": [1, 2.5, 3.0], \"ok\": true, \"none\": null}}|[\n  1,\n  {\n    \"a\": \"x\\ny\"\n  }\n]|{}"
    );
}

#[test]
fn jinja2_leniencies_real_templates_rely_on() {
    // `{% generation %}` (Hugging Face's assistant-mask tag) renders its body; an undefined
    // `tools` has length 0; `{% break %}` works; Python string methods exist.
    let src = "{% for m in messages %}{%- generation -%}[{{ m.content.upper() }}]{%- endgeneration -%}{% if loop.index == 2 %}{% break %}{% endif %}{% endfor %}{{ tools|length }}{{ 'a,b'.split(',')|join('+') }}";
    let t = ChatTemplate::from_jinja(src, "", "").unwrap();
    assert_eq!(
        t.render(&conversation(), false).unwrap(),
        "[YOU ARE A CONCISE ASSISTANT.][WHAT IS THE CAPITAL OF FRANCE?]0a+b"
    );
}

#[test]
fn raise_exception_is_a_typed_error() {
    let t = ChatTemplate::from_jinja(HF_STYLE, "<s>", "</s>").unwrap();
    let bad = vec![ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
    match t.render(&bad, true) {
        Err(TemplateError::Raised { message }) => {
            assert_eq!(
                message,
                "Conversation roles must alternate user/assistant/user/assistant/..."
            )
        }
        other => panic!("expected Raised, got {other:?}"),
    }
}

#[test]
fn syntax_and_render_errors_are_typed() {
    match ChatTemplate::from_jinja("{% if %}oops", "", "") {
        Err(TemplateError::Compile { detail }) => assert!(!detail.is_empty()),
        other => panic!("expected Compile, got {other:?}"),
    }
    let t = ChatTemplate::from_jinja("{{ messages[0]['content'] + 1 }}", "", "").unwrap();
    assert!(matches!(
        t.render(&conversation(), false),
        Err(TemplateError::Render { .. })
    ));
}

#[test]
fn jinja_template_for_a_tokenizer_drops_the_duplicate_bos() {
    use ferrox_engine::tokenizer::VocabMetadata;
    // SPM vocabulary whose metadata says "add BOS": the template's own `{{ bos_token }}` is
    // removed from the rendered text so the prompt does not start with two BOS tokens.
    let tok = Tokenizer::from_metadata(VocabMetadata {
        model: "llama".into(),
        tokens: ["<unk>", "<s>", "</s>", "<|im_end|>", "a"]
            .map(String::from)
            .to_vec(),
        token_types: Some(vec![2, 3, 3, 3, 1]),
        add_bos: Some(true),
        ..Default::default()
    })
    .unwrap();
    let t = ChatTemplate::from_jinja_for(
        "{{ bos_token }}[{{ messages[0].content }}]{{ eos_token }}",
        &tok,
    )
    .unwrap();
    assert_eq!(t.bos_token(), "<s>");
    assert_eq!(
        t.render(&conversation(), false).unwrap(),
        "[You are a concise assistant.]</s>"
    );
    // Generation stops at every end-of-generation token of the vocabulary.
    assert_eq!(t.stop_strings(), ["</s>", "<|im_end|>"]);
}

#[test]
fn builtin_choice_by_architecture() {
    use ferrox_engine::tokenizer::VocabMetadata;
    let tok = |extra: &str| {
        Tokenizer::from_metadata(VocabMetadata {
            model: "llama".into(),
            tokens: ["<unk>", "<s>", "</s>", extra].map(String::from).to_vec(),
            ..Default::default()
        })
        .unwrap()
    };
    let plain = tok("x");
    let llama3 = tok("<|start_header_id|>");
    assert_eq!(
        BuiltinFormat::for_arch("gemma3", &plain),
        BuiltinFormat::Gemma
    );
    assert_eq!(
        BuiltinFormat::for_arch("qwen2", &plain),
        BuiltinFormat::ChatMl
    );
    assert_eq!(
        BuiltinFormat::for_arch("qwen3", &plain),
        BuiltinFormat::ChatMl
    );
    assert_eq!(
        BuiltinFormat::for_arch("llama", &llama3),
        BuiltinFormat::Llama3
    );
    assert_eq!(
        BuiltinFormat::for_arch("llama", &plain),
        BuiltinFormat::Llama2
    );
    assert_eq!(
        BuiltinFormat::for_arch("mystery", &plain),
        BuiltinFormat::ChatMl
    );
}

#[test]
fn default_model_falls_back_to_gemma_and_tokenizes_like_llama_cpp() {
    let Some(path) = ferrox_engine::cache::model_for_tests() else {
        return;
    };
    let f = ferrox_gguf::GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&f).unwrap();
    let t = ChatTemplate::from_gguf(&f, "gemma3", &tok).unwrap();
    assert_eq!(t.builtin_format(), Some(BuiltinFormat::Gemma));
    assert_eq!(t.stop_strings(), ["<end_of_turn>"]);
    assert_eq!(t.bos_token(), "<bos>");
    let prompt = t.render(&conversation(), true).unwrap();
    assert_eq!(prompt, GEMMA_GOLDEN);
    // The markers become single control tokens, each turn's end is EOG.
    let ids = tok.encode(&prompt, true, true);
    assert_eq!(ids[..3], [2, 105, 2364]);
    assert_eq!(ids.iter().filter(|&&id| id == 106).count(), 3);
    assert!(tok.is_eog(106));
}
