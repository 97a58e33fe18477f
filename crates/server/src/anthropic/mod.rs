//! Anthropic's Messages API.
