//! What a client's JSON schema leaves open, settled as llama.cpp's schema grammars settle it
//! (and so llama-server's and Ollama's), before the schema is compiled. The schemas clients
//! send — a pydantic model's, a tool's parameters — are written for big models that stop on
//! their own; a small model left free keeps writing until its budget runs out, and the reply
//! then holds neither the answer nor a call. Two rules:
//!
//! - **Closed objects.** An object schema that lists `properties` and says nothing of
//!   `additionalProperties` takes no other properties.
//! - **Bounded numbers.** An integer without bounds has at most 16 digits (between
//!   ±9,999,999,999,999,999, as llama.cpp's integer rule allows); a number's integral part
//!   likewise (±10^16). A schema's own `minimum`/`maximum` (or exclusive ones) win, side by
//!   side. A number's fraction and exponent keep their digits unbounded: the grammar engine
//!   has no way to say it short of changing the value's type.
//!
//! Each rule walks every place a schema holds schemas (`properties`, `items`, `anyOf`,
//! `$defs`, …), never a map of names as if it were a schema.

use serde_json::{json, Value};

/// The largest integer with 16 digits.
const MAX_INT: i64 = 9_999_999_999_999_999;
/// A number's integral part stays under this.
const MAX_NUMBER: f64 = 1e16;

/// Applies both rules to `schema` and every schema in it.
pub fn apply(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if obj.get("properties").is_some_and(Value::is_object)
        && !obj.contains_key("additionalProperties")
    {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let bounds = if types.contains(&"number") {
        Some((json!(-MAX_NUMBER), json!(MAX_NUMBER)))
    } else if types.contains(&"integer") {
        Some((json!(-MAX_INT), json!(MAX_INT)))
    } else {
        None
    };
    if let Some((low, high)) = bounds {
        if !obj.contains_key("minimum") && !obj.contains_key("exclusiveMinimum") {
            obj.insert("minimum".into(), low);
        }
        if !obj.contains_key("maximum") && !obj.contains_key("exclusiveMaximum") {
            obj.insert("maximum".into(), high);
        }
    }
    for (key, value) in obj.iter_mut() {
        match key.as_str() {
            // Maps of name → schema.
            "properties" | "patternProperties" | "$defs" | "definitions" => {
                if let Some(map) = value.as_object_mut() {
                    map.values_mut().for_each(apply);
                }
            }
            // Lists of schemas.
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Some(list) = value.as_array_mut() {
                    list.iter_mut().for_each(apply);
                }
            }
            // One schema (or, for an old-style `items`, a list).
            "items" | "additionalProperties" | "not" | "if" | "then" | "else" | "contains" => {
                match value {
                    Value::Array(list) => list.iter_mut().for_each(apply),
                    other => apply(other),
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_with_properties_are_closed_unless_they_say_otherwise() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"x": {"type": "boolean"}}},
                "properties": {"type": "object", "additionalProperties": true,
                               "properties": {"y": {}}},
                "list": {"type": "array", "items": {"properties": {"z": {}}}},
            },
            "$defs": {"D": {"anyOf": [{"properties": {"w": {}}}, {"type": "string"}]}},
        });
        apply(&mut s);
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["a"]["additionalProperties"], false);
        assert_eq!(s["properties"]["properties"]["additionalProperties"], true);
        assert_eq!(
            s["properties"]["list"]["items"]["additionalProperties"],
            false
        );
        assert_eq!(s["$defs"]["D"]["anyOf"][0]["additionalProperties"], false);
        // The properties map itself is not a schema: no key added to it.
        assert!(s["properties"].get("additionalProperties").is_none());
        let mut any = json!({"type": "object"});
        apply(&mut any);
        assert!(
            any.get("additionalProperties").is_none(),
            "no properties: any object"
        );
    }

    #[test]
    fn numbers_get_the_bounds_they_do_not_have() {
        let mut s = json!({"type": "object", "properties": {
            "n": {"type": "integer"},
            "m": {"type": "integer", "minimum": 0},
            "x": {"type": ["number", "null"], "exclusiveMaximum": 1.5},
            "items": {"type": "array", "items": {"type": "integer", "maximum": 7}},
        }});
        apply(&mut s);
        let p = &s["properties"];
        assert_eq!(
            (&p["n"]["minimum"], &p["n"]["maximum"]),
            (&json!(-MAX_INT), &json!(MAX_INT))
        );
        assert_eq!(
            (&p["m"]["minimum"], &p["m"]["maximum"]),
            (&json!(0), &json!(MAX_INT))
        );
        assert_eq!(p["x"]["minimum"], json!(-MAX_NUMBER));
        assert!(
            p["x"].get("maximum").is_none(),
            "an exclusive bound is a bound"
        );
        assert_eq!(p["items"]["items"]["minimum"], json!(-MAX_INT));
        assert_eq!(p["items"]["items"]["maximum"], json!(7));
    }
}
