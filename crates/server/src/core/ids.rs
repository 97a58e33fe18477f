//! Random ids for replies, items and stored responses: a protocol's prefix (`chatcmpl-`,
//! `msg_`, `resp_`) and 24 random hex digits, 96 bits, so two never meet in practice.

use rand::Rng;

/// `prefix` and 24 random hex digits.
pub fn random_id(prefix: &str) -> String {
    let mut rng = rand::thread_rng();
    let suffix: String = (0..24)
        .map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap_or('0'))
        .collect();
    format!("{prefix}{suffix}")
}

/// Seconds since the Unix epoch, now: the `created` of replies and listings.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
