//! Random ids for replies, items and stored responses: a protocol's prefix (`chatcmpl-`,
//! `msg_`, `resp_`) and 24 random hex digits, 96 bits, so two never meet in practice; and
//! the timestamps replies carry (Unix seconds, RFC 3339).

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

/// `t` as an RFC 3339 UTC timestamp with nanoseconds (`2026-12-02T06:26:26.123456789Z`):
/// Ollama's `created_at`, `modified_at` and `expires_at`. Times before the epoch are the
/// epoch.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01: years are counted in 400-year
/// eras of 146,097 days, each era's years starting on March 1st so that the leap day is
/// the last day of a year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097; // day of the era, 0..146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March-based year
    let mp = (5 * doy + 2) / 153; // month, March = 0
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn rfc3339_dates_are_the_calendars() {
        let at = |secs: u64, nanos: u32| rfc3339(UNIX_EPOCH + Duration::new(secs, nanos));
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000000Z");
        // 2000-02-29 (a leap day of a century divisible by 400), 12:34:56.
        assert_eq!(at(951_827_696, 7), "2000-02-29T12:34:56.000000007Z");
        assert_eq!(at(951_868_800, 0), "2000-03-01T00:00:00.000000000Z");
        // 2100 is no leap year: February 28th is followed by March 1st.
        assert_eq!(at(4_107_456_000, 0), "2100-02-28T00:00:00.000000000Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000000000Z");
        assert_eq!(
            at(1_798_761_599, 999_999_999),
            "2026-12-31T23:59:59.999999999Z"
        );
    }
}
