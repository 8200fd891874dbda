//! Values the subcommands' arguments share: a key name and a duration.

use std::time::Duration;

/// A lock, semaphore or read-write lock name as the command line gives
/// it: refused by clap (exit status 2, like any other bad argument) when
/// the library would refuse it, before anything connects.
pub fn key(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the key is empty".into());
    }
    if s.len() > relaylock::MAX_KEY_LEN {
        return Err(format!(
            "the key is {} bytes, the limit is {}",
            s.len(),
            relaylock::MAX_KEY_LEN
        ));
    }
    Ok(s.to_owned())
}

/// A duration as `humantime` reads it (`250ms`, `10s`, `2m`, `1h`,
/// `1h 30m`), or a plain number of seconds (`10`, `0.5`); between 1 ms and
/// 24 h.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let d = match s.parse::<f64>() {
        Ok(secs) => Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?}: must be between 1 ms and 24 h"))?,
        Err(_) => humantime::parse_duration(s)
            .map_err(|e| format!("{s:?}: {e} (e.g. 500ms, 10s, 2m, 1h)"))?,
    };
    if !(Duration::from_millis(1)..=Duration::from_secs(86_400)).contains(&d) {
        return Err(format!("{s:?}: must be between 1 ms and 24 h"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        for bad in ["", "0s", "25h", "x", "-1s", "100d", "500us", "NaN", "inf"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
