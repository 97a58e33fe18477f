//! `ferrox ps`: what a running server has loaded, as `ollama ps` shows it: each model's
//! status, memory (weights and KV pool, as priced before loading) and when an idle one
//! unloads. It reads the server's `GET /v1/models`.

use ferrox_server::client::Endpoint;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct PsArgs {
    /// The server's URL.
    #[arg(long, env = "FERROX_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The server's API key, if it needs one.
    #[arg(long, env = "FERROX_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// List unloaded models too.
    #[arg(long)]
    pub all: bool,
}

pub fn ps(args: PsArgs) -> Result<(), String> {
    let mut endpoint = Endpoint::parse(&args.url).map_err(|e| e.to_string())?;
    endpoint.api_key = args.api_key.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let list = runtime.block_on(async {
        let r = endpoint
            .get("/v1/models")
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status;
        let body = r.json().await.map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("{}: HTTP {status}: {body}", args.url));
        }
        Ok::<Value, String>(body)
    })?;
    print!(
        "{}",
        table(&list, args.all, ferrox_server::core::ids::unix_now())
    );
    Ok(())
}

/// The listing as a table: NAME, STATUS, SIZE, UNTIL.
fn table(list: &Value, all: bool, now: u64) -> String {
    let mut rows = vec![[
        "NAME".to_string(),
        "STATUS".into(),
        "SIZE".into(),
        "UNTIL".into(),
    ]];
    for m in list["data"].as_array().into_iter().flatten() {
        let status = m["status"].as_str().unwrap_or("?");
        if !all && status != "loaded" && status != "loading" {
            continue;
        }
        let f = &m["ferrox"];
        let until = match (f["busy"].as_bool(), f["expires_at"].as_u64()) {
            (Some(true), _) => "in use".to_string(),
            (_, Some(at)) => format!("{} s from now", at.saturating_sub(now)),
            _ if status == "loaded" => "forever".into(),
            _ => String::new(),
        };
        let bytes = f["memory_bytes"].as_u64().unwrap_or(0);
        let size = if bytes == 0 {
            String::new()
        } else {
            format!("{:.0} MB", bytes as f64 / 1e6)
        };
        rows.push([
            m["id"].as_str().unwrap_or("?").to_string(),
            status.to_string(),
            size,
            until,
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("    ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn loaded_models_show_size_and_expiry() {
        let list = json!({"data": [
            {"id": "gemma", "status": "loaded",
             "ferrox": {"memory_bytes": 1_300_000_000u64, "busy": false, "expires_at": 1300}},
            {"id": "busy-one", "status": "loaded",
             "ferrox": {"memory_bytes": 2_000_000, "busy": true, "expires_at": null}},
            {"id": "kept", "status": "loaded",
             "ferrox": {"memory_bytes": 2_000_000, "busy": false, "expires_at": null}},
            {"id": "cold", "status": "unloaded", "ferrox": {"memory_bytes": 0}},
        ]});
        let t = table(&list, false, 1000);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[1].starts_with("gemma ") && lines[1].contains("1300 MB"),
            "{t}"
        );
        assert!(lines[1].ends_with("300 s from now"), "{t}");
        assert!(lines[2].ends_with("in use"), "{t}");
        assert!(lines[3].ends_with("forever"), "{t}");
        assert!(table(&list, true, 1000).contains("cold "), "{t}");
    }
}
