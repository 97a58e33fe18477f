//! Code-point classes used by the BPE pre-tokenizers.
//!
//! llama.cpp classifies every code point into one general-category class (letter, number,
//! punctuation, ...) plus a separate whitespace bit, and its hand-written splitters test those
//! classes. This module gives the same classes from the Unicode general category, so the
//! splitters in `pretokenize.rs` can follow llama.cpp's decisions code point by code point.
//! The whitespace set is Unicode's `White_Space` property, which is what llama.cpp lists.

use unicode_general_category::{get_general_category, GeneralCategory as Gc};

/// The category class of one code point (exactly one per code point).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Unassigned code points (`Cn`).
    Undefined,
    /// `\p{N}`
    Number,
    /// `\p{L}`
    Letter,
    /// `\p{Z}`
    Separator,
    /// `\p{M}`
    Mark,
    /// `\p{P}`
    Punctuation,
    /// `\p{S}`
    Symbol,
    /// `\p{C}` other than `Cn`
    Control,
}

/// Class plus whitespace bit of one code point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flags {
    pub class: Class,
    pub whitespace: bool,
}

impl Flags {
    pub fn of(c: char) -> Flags {
        Flags {
            class: class_of(c),
            whitespace: c.is_whitespace(),
        }
    }
    pub fn is_letter(self) -> bool {
        self.class == Class::Letter
    }
    pub fn is_number(self) -> bool {
        self.class == Class::Number
    }
}

fn class_of(c: char) -> Class {
    if c.is_ascii() {
        // Fast path; identical to the table for ASCII.
        return match c {
            'a'..='z' | 'A'..='Z' => Class::Letter,
            '0'..='9' => Class::Number,
            ' ' => Class::Separator,
            '\0'..='\x1f' | '\x7f' => Class::Control,
            '$' | '+' | '<' | '=' | '>' | '^' | '`' | '|' | '~' => Class::Symbol,
            _ => Class::Punctuation,
        };
    }
    match get_general_category(c) {
        Gc::UppercaseLetter
        | Gc::LowercaseLetter
        | Gc::TitlecaseLetter
        | Gc::ModifierLetter
        | Gc::OtherLetter => Class::Letter,
        Gc::DecimalNumber | Gc::LetterNumber | Gc::OtherNumber => Class::Number,
        Gc::SpaceSeparator | Gc::LineSeparator | Gc::ParagraphSeparator => Class::Separator,
        Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark => Class::Mark,
        Gc::ConnectorPunctuation
        | Gc::DashPunctuation
        | Gc::OpenPunctuation
        | Gc::ClosePunctuation
        | Gc::InitialPunctuation
        | Gc::FinalPunctuation
        | Gc::OtherPunctuation => Class::Punctuation,
        Gc::MathSymbol | Gc::CurrencySymbol | Gc::ModifierSymbol | Gc::OtherSymbol => Class::Symbol,
        Gc::Control | Gc::Format | Gc::Surrogate | Gc::PrivateUse => Class::Control,
        Gc::Unassigned => Class::Undefined,
        _ => Class::Undefined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_fast_path_agrees_with_table() {
        for b in 0u8..128 {
            let c = b as char;
            let table = match get_general_category(c) {
                Gc::UppercaseLetter | Gc::LowercaseLetter => Class::Letter,
                Gc::DecimalNumber => Class::Number,
                Gc::SpaceSeparator => Class::Separator,
                Gc::Control => Class::Control,
                Gc::MathSymbol | Gc::CurrencySymbol | Gc::ModifierSymbol => Class::Symbol,
                _ => Class::Punctuation,
            };
            assert_eq!(class_of(c), table, "{c:?}");
        }
    }

    #[test]
    fn classes_of_other_scripts() {
        assert_eq!(class_of('é'), Class::Letter);
        assert_eq!(class_of('中'), Class::Letter);
        assert_eq!(class_of('٣'), Class::Number);
        assert_eq!(class_of('²'), Class::Number);
        assert_eq!(class_of('。'), Class::Punctuation);
        assert_eq!(class_of('€'), Class::Symbol);
        assert_eq!(class_of('😀'), Class::Symbol);
        assert_eq!(class_of('\u{301}'), Class::Mark);
        assert!(Flags::of('\u{3000}').whitespace);
        assert!(Flags::of('\u{a0}').whitespace);
        assert!(!Flags::of('\u{200b}').whitespace);
    }
}
