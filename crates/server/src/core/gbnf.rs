//! GBNF, llama.cpp's grammar format, translated to the Lark syntax the grammar engine
//! (llguidance) compiles, so that a llama.cpp client's `grammar` constrains the output here
//! as it does there instead of being refused.
//!
//! What GBNF has, and what each becomes:
//! - `name ::= alternatives`, a rule (names may hold `-` and capitals, which Lark's do not:
//!   every rule is renamed `r<i>_<name>`, and `root` is the start);
//! - `"literal"` with `\n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH` escapes → a JSON string;
//! - `[a-z_]`, `[^"\\]` character classes → a one-character regex, every member written as
//!   `\x{HEX}` so no character can mean anything else inside Lark's `/.../`;
//! - `.` (any character) → `/(?s:.)/`;
//! - `( … )`, `|`, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` → the same in Lark;
//! - `#` comments.
//!
//! A rule ends where the next `name ::=` begins, as in llama.cpp's parser. What cannot be
//! translated (a syntax error, an empty alternative, a rule used but never defined, no
//! `root`) is an error naming what and where, before anything is generated: a grammar that
//! does not compile never runs unconstrained.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The Lark text of a GBNF grammar, or what is wrong with it.
pub fn to_lark(gbnf: &str) -> Result<String, String> {
    let tokens = lex(gbnf)?;
    let mut p = Parser {
        tokens,
        at: 0,
        names: BTreeMap::new(),
        used: Vec::new(),
    };
    let mut rules: Vec<(String, String)> = Vec::new();
    while p.at < p.tokens.len() {
        let name = match p.next() {
            Some(Tok::Name(n)) => n,
            other => {
                return Err(format!(
                    "expected a rule name, found {}",
                    show(other.as_ref())
                ))
            }
        };
        if p.next() != Some(Tok::Defines) {
            return Err(format!("expected `::=` after the rule name `{name}`"));
        }
        if rules.iter().any(|(n, _)| *n == name) {
            return Err(format!("the rule `{name}` is defined twice"));
        }
        p.lark_name(&name);
        let body = p.alternatives(&name)?;
        rules.push((name, body));
    }
    if !rules.iter().any(|(n, _)| n == "root") {
        return Err("the grammar has no `root` rule".into());
    }
    if let Some(missing) = p.used.iter().find(|u| !rules.iter().any(|(n, _)| n == *u)) {
        return Err(format!("the rule `{missing}` is used but never defined"));
    }
    let mut out = format!("start: {}\n", p.lark_name("root"));
    for (name, body) in &rules {
        let _ = writeln!(out, "{}: {body}", p.lark_name(name));
    }
    Ok(out)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Defines,
    /// A literal's text, escapes decoded.
    Literal(String),
    /// A character class: negated, and its members as inclusive ranges.
    Class(bool, Vec<(char, char)>),
    Any,
    Open,
    Close,
    Bar,
    /// `*`, `+`, `?` or `{…}`, as Lark writes it.
    Repeat(String),
}

fn show(t: Option<&Tok>) -> String {
    match t {
        None => "the end".into(),
        Some(Tok::Name(n)) => format!("`{n}`"),
        Some(Tok::Defines) => "`::=`".into(),
        Some(Tok::Literal(l)) => format!("{l:?}"),
        Some(Tok::Class(..)) => "a character class".into(),
        Some(Tok::Any) => "`.`".into(),
        Some(Tok::Open) => "`(`".into(),
        Some(Tok::Close) => "`)`".into(),
        Some(Tok::Bar) => "`|`".into(),
        Some(Tok::Repeat(r)) => format!("`{r}`"),
    }
}

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let mut it = src.char_indices().peekable();
    while let Some(&(at, c)) = it.peek() {
        match c {
            c if c.is_whitespace() => {
                it.next();
            }
            '#' => while it.next_if(|&(_, c)| c != '\n').is_some() {},
            ':' => {
                if src[at..].starts_with("::=") {
                    it.nth(2);
                    out.push(Tok::Defines);
                } else {
                    return Err(format!(
                        "unexpected `:` at byte {at} (a rule is `name ::= …`)"
                    ));
                }
            }
            '"' => {
                it.next();
                let mut text = String::new();
                loop {
                    match it.next() {
                        None => return Err(format!("the literal at byte {at} is not closed")),
                        Some((_, '"')) => break,
                        Some((_, '\\')) => text.push(escape(&mut it, at)?),
                        Some((_, c)) => text.push(c),
                    }
                }
                out.push(Tok::Literal(text));
            }
            '[' => {
                it.next();
                let negated = it.next_if(|&(_, c)| c == '^').is_some();
                let mut ranges = Vec::new();
                loop {
                    let first = match it.next() {
                        None => {
                            return Err(format!("the character class at byte {at} is not closed"))
                        }
                        Some((_, ']')) => break,
                        Some((_, '\\')) => escape(&mut it, at)?,
                        Some((_, c)) => c,
                    };
                    let is_range = it.peek().is_some_and(|&(_, c)| c == '-')
                        && it.clone().nth(1).is_some_and(|(_, c)| c != ']');
                    if is_range {
                        it.next();
                        let last = match it.next() {
                            Some((_, '\\')) => escape(&mut it, at)?,
                            Some((_, c)) => c,
                            None => unreachable!("peeked"),
                        };
                        if last < first {
                            return Err(format!(
                                "the range {first:?}-{last:?} at byte {at} is backwards"
                            ));
                        }
                        ranges.push((first, last));
                    } else {
                        ranges.push((first, first));
                    }
                }
                if ranges.is_empty() {
                    return Err(format!("the character class at byte {at} is empty"));
                }
                out.push(Tok::Class(negated, ranges));
            }
            '.' => {
                it.next();
                out.push(Tok::Any);
            }
            '(' | ')' | '|' | '*' | '+' | '?' => {
                it.next();
                out.push(match c {
                    '(' => Tok::Open,
                    ')' => Tok::Close,
                    '|' => Tok::Bar,
                    other => Tok::Repeat(other.to_string()),
                });
            }
            '{' => {
                let end = src[at..]
                    .find('}')
                    .ok_or_else(|| format!("the repetition at byte {at} is not closed"))?;
                let inner: String = src[at + 1..at + end]
                    .chars()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                let ok = match inner.split_once(',') {
                    None => inner.parse::<u32>().is_ok(),
                    Some((m, n)) => {
                        m.parse::<u32>().is_ok() && (n.is_empty() || n.parse::<u32>().is_ok())
                    }
                };
                if !ok {
                    return Err(format!("`{{{inner}}}` at byte {at} is not a repetition"));
                }
                for _ in 0..=end {
                    it.next();
                }
                out.push(Tok::Repeat(format!("{{{inner}}}")));
            }
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => {
                let mut name = String::new();
                while let Some((_, c)) =
                    it.next_if(|&(_, c)| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    name.push(c);
                }
                out.push(Tok::Name(name));
            }
            other => return Err(format!("unexpected {other:?} at byte {at}")),
        }
    }
    Ok(out)
}

/// The character after a backslash (already consumed), decoded.
fn escape(
    it: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
    at: usize,
) -> Result<char, String> {
    let bad = || format!("a bad escape in the token at byte {at}");
    let hex = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>, n: usize| {
        let digits: String = (0..n).filter_map(|_| it.next().map(|(_, c)| c)).collect();
        u32::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| digits.len() == n)
            .and_then(char::from_u32)
            .ok_or_else(bad)
    };
    match it.next().map(|(_, c)| c) {
        Some('n') => Ok('\n'),
        Some('r') => Ok('\r'),
        Some('t') => Ok('\t'),
        Some('x') => hex(it, 2),
        Some('u') => hex(it, 4),
        Some('U') => hex(it, 8),
        Some(c @ ('\\' | '"' | '[' | ']' | '-' | '^')) => Ok(c),
        _ => Err(bad()),
    }
}

struct Parser {
    tokens: Vec<Tok>,
    at: usize,
    /// GBNF name → Lark name.
    names: BTreeMap<String, String>,
    /// Every rule name referenced, in order.
    used: Vec<String>,
}

impl Parser {
    fn next(&mut self) -> Option<Tok> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at)
    }

    /// Whether the next tokens begin another rule (`name ::=`).
    fn at_rule_start(&self) -> bool {
        matches!(self.tokens.get(self.at), Some(Tok::Name(_)))
            && self.tokens.get(self.at + 1) == Some(&Tok::Defines)
    }

    fn lark_name(&mut self, name: &str) -> String {
        let n = self.names.len();
        self.names
            .entry(name.to_string())
            .or_insert_with(|| {
                let clean: String = name
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            c.to_ascii_lowercase()
                        } else {
                            '_'
                        }
                    })
                    .collect();
                format!("r{n}_{clean}")
            })
            .clone()
    }

    fn alternatives(&mut self, rule: &str) -> Result<String, String> {
        let mut alts = vec![self.sequence(rule)?];
        while self.peek() == Some(&Tok::Bar) {
            self.at += 1;
            alts.push(self.sequence(rule)?);
        }
        Ok(alts.join(" | "))
    }

    fn sequence(&mut self, rule: &str) -> Result<String, String> {
        let mut items = Vec::new();
        loop {
            if self.at_rule_start() {
                break;
            }
            let item = match self.peek() {
                None | Some(Tok::Bar) | Some(Tok::Close) => break,
                Some(Tok::Name(_)) => {
                    let Some(Tok::Name(n)) = self.next() else {
                        unreachable!("peeked")
                    };
                    self.used.push(n.clone());
                    self.lark_name(&n)
                }
                Some(Tok::Literal(_)) => {
                    let Some(Tok::Literal(l)) = self.next() else {
                        unreachable!("peeked")
                    };
                    if l.is_empty() {
                        return Err(format!("an empty literal in `{rule}`; leave it out"));
                    }
                    serde_json::to_string(&l).map_err(|e| e.to_string())?
                }
                Some(Tok::Class(..)) => {
                    let Some(Tok::Class(negated, ranges)) = self.next() else {
                        unreachable!("peeked")
                    };
                    class_regex(negated, &ranges)
                }
                Some(Tok::Any) => {
                    self.at += 1;
                    "/(?s:.)/".to_string()
                }
                Some(Tok::Open) => {
                    self.at += 1;
                    let inner = self.alternatives(rule)?;
                    if self.next() != Some(Tok::Close) {
                        return Err(format!("a `(` in `{rule}` is not closed"));
                    }
                    format!("({inner})")
                }
                Some(other) => {
                    return Err(format!("unexpected {} in `{rule}`", show(Some(other))));
                }
            };
            let mut item = item;
            while let Some(Tok::Repeat(r)) = self.peek() {
                item.push_str(r);
                self.at += 1;
            }
            items.push(item);
        }
        if items.is_empty() {
            return Err(format!(
                "an empty alternative in `{rule}`; write the optional part as `( … )?`"
            ));
        }
        Ok(items.join(" "))
    }
}

/// A one-character regex: every member as `\x{HEX}`.
fn class_regex(negated: bool, ranges: &[(char, char)]) -> String {
    let mut re = String::from("/[");
    if negated {
        re.push('^');
    }
    for &(a, b) in ranges {
        let _ = write!(re, "\\x{{{:X}}}", a as u32);
        if b != a {
            let _ = write!(re, "-\\x{{{:X}}}", b as u32);
        }
    }
    re.push_str("]/");
    re
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_construct_translates() {
        let lark = to_lark(
            "# a comment\nroot ::= greeting (\" \" Name-Part){1,3} [^\\n\"]* .? \"\\x41\"\n\
             greeting ::= \"hi\" | \"hello\\n\"\nName-Part ::= [A-Z] [a-z0-9_-]+\n",
        )
        .unwrap();
        let want = "start: r0_root\n\
            r0_root: r1_greeting (\" \" r2_name_part){1,3} /[^\\x{A}\\x{22}]/* /(?s:.)/? \"A\"\n\
            r1_greeting: \"hi\" | \"hello\\n\"\n\
            r2_name_part: /[\\x{41}-\\x{5A}]/ /[\\x{61}-\\x{7A}\\x{30}-\\x{39}\\x{5F}\\x{2D}]/+\n";
        assert_eq!(lark, want);
    }

    #[test]
    fn every_mistake_is_named() {
        for (gbnf, says) in [
            ("root ::= \"a", "not closed"),
            ("root ::= [a-", "not closed"),
            ("root ::= [z-a]", "backwards"),
            ("root ::= []", "empty"),
            ("root ::= \"a\" |", "empty alternative"),
            ("root ::= other", "`other` is used but never defined"),
            ("item ::= \"a\"", "no `root`"),
            ("root ::= \"a\"\nroot ::= \"b\"", "defined twice"),
            ("root ::= (\"a\"", "not closed"),
            ("root ::= \"a\"{x}", "not a repetition"),
            ("root := \"a\"", "unexpected `:`"),
            ("root ::= \"\\q\"", "bad escape"),
            ("root ::= \"a\" @", "unexpected '@'"),
        ] {
            let e = to_lark(gbnf).unwrap_err();
            assert!(e.contains(says), "{gbnf:?}: {e}");
        }
    }
}
