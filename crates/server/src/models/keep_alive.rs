//! `keep_alive`: how long a model stays loaded once it is idle, with Ollama's meaning, so
//! that an Ollama client's habit works here unchanged.
//!
//! Ollama takes a number of seconds or a Go duration string (`"5m"`, `"1h30m"`, `"300ms"`);
//! `0` unloads the model as soon as its last request ends, and any negative value keeps it
//! loaded for good. A request's value holds until the next request for the model says
//! otherwise (a request without one restores the server's `--keep-alive`).

use std::time::Duration;

use serde_json::Value;

use crate::core::error::ApiError;

/// How long an idle model stays loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// Until it must make room for another model (or an admin unloads it).
    Forever,
    /// This long after its last request ended (zero: at once).
    For(Duration),
}

impl KeepAlive {
    /// Parses a request's `keep_alive` value (the error names the parameter).
    pub fn from_json(v: &Value) -> Result<KeepAlive, ApiError> {
        let bad = |why: &str| ApiError::invalid("keep_alive", why.to_string());
        match v {
            Value::Number(n) => {
                let secs = n.as_f64().ok_or_else(|| bad("not a number"))?;
                Ok(KeepAlive::from_secs(secs))
            }
            Value::String(s) => KeepAlive::parse(s).map_err(|why| bad(&why)),
            _ => Err(bad(
                "expected a number of seconds or a duration such as \"5m\"",
            )),
        }
    }

    /// A duration string: `"-1"`, `"0"`, `"300"` (seconds), or Go's form, a sequence of
    /// numbers with units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h` (`"1h30m"`, `"1.5s"`), with an
    /// optional sign.
    pub fn parse(text: &str) -> Result<KeepAlive, String> {
        let t = text.trim();
        if let Ok(secs) = t.parse::<f64>() {
            return Ok(KeepAlive::from_secs(secs));
        }
        let (negative, mut rest) = match t.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, t.strip_prefix('+').unwrap_or(t)),
        };
        let bad = || format!("{text:?} is not a duration (e.g. \"30s\", \"5m\", \"1h\", \"-1\")");
        let mut secs = 0.0;
        if rest.is_empty() {
            return Err(bad());
        }
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(bad)?;
            let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let scale = match &rest[..unit_len] {
                "ns" => 1e-9,
                "us" | "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return Err(bad()),
            };
            secs += n * scale;
            rest = &rest[unit_len..];
        }
        Ok(KeepAlive::from_secs(if negative { -secs } else { secs }))
    }

    /// Negative, infinite or beyond what a `Duration` holds (~5e11 years): for ever.
    fn from_secs(secs: f64) -> KeepAlive {
        if secs < 0.0 {
            return KeepAlive::Forever;
        }
        Duration::try_from_secs_f64(secs).map_or(KeepAlive::Forever, KeepAlive::For)
    }

    /// Seconds for a listing: `-1` for ever.
    pub fn as_secs_f64(self) -> f64 {
        match self {
            KeepAlive::Forever => -1.0,
            KeepAlive::For(d) => d.as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ollamas_forms_parse() {
        let secs = |s: u64| KeepAlive::For(Duration::from_secs(s));
        for (text, want) in [
            ("0", secs(0)),
            ("300", secs(300)),
            ("5m", secs(300)),
            ("1h30m", secs(5400)),
            ("1.5s", KeepAlive::For(Duration::from_millis(1500))),
            ("250ms", KeepAlive::For(Duration::from_millis(250))),
            ("-1", KeepAlive::Forever),
            ("-5m", KeepAlive::Forever),
            ("1e30", KeepAlive::Forever),
        ] {
            assert_eq!(KeepAlive::parse(text), Ok(want), "{text}");
        }
        for bad in ["", "5 minutes", "m", "5x", "1h30", "-"] {
            assert!(KeepAlive::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(KeepAlive::from_json(&json!(-1)), Ok(KeepAlive::Forever));
        assert_eq!(KeepAlive::from_json(&json!(0)), Ok(secs(0)));
        let e = KeepAlive::from_json(&json!(true)).unwrap_err();
        assert_eq!(e.param(), Some("keep_alive"));
    }
}
