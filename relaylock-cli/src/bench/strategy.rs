//! What a load test runs: the strategy (relaylock waiting by pub/sub or by
//! polling, the bare lock, the fenced floor) and the primitive the workers
//! take, as the command line writes them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use relaylock::WaitStrategy;

/// A strategy as written on the command line: relaylock with pub/sub
/// waiting (`pubsub`) or with polling (`poll:<ms>`), or the bare lock a user
/// would write instead (`bare:<ms>`, see [`crate::bench::bare`]), or the cheapest fenced
/// lock, the floor of a script-based protocol (`floor:<ms>`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    /// relaylock, waiting this way.
    Lock(WaitStrategy),
    /// The seeds' algorithm: `SET NX PX`, retried every interval; release
    /// by compare-and-delete. No fencing, no queue, no waiting machinery.
    Bare(Duration),
    /// The cheapest lock that keeps relaylock's fencing guarantee: one
    /// script each way (`GET`, `TIME`, `SET`; `GET`, `SET`), retried every
    /// interval. No queue, no hand-over, no replay record (see [`crate::bench::bare`]).
    Floor(Duration),
    /// With `--keys-per-lock`: the keys of a set as single relaylock locks,
    /// taken one by one in the caller's (random) order, each waiting at
    /// most this long; when one is not taken in time, every lock taken is
    /// released and the set starts over (Redisson's `MultiLock`). Two calls
    /// naming keys in opposite orders deadlock until one's wait runs out.
    OneByOne(Duration),
}

impl Strategy {
    /// How the relaylock client of a worker waits (a bare worker's client
    /// only provides the connection).
    pub fn wait_strategy(self) -> WaitStrategy {
        match self {
            Strategy::Lock(w) => w,
            Strategy::Bare(_) | Strategy::Floor(_) | Strategy::OneByOne(_) => WaitStrategy::PubSub,
        }
    }
}

/// The strategies, as an error message lists them.
const EXPECTED: &str = "pubsub, poll:<ms>, bare:<ms>, floor:<ms> or onebyone:<ms>";

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "pubsub" {
            return Ok(Strategy::Lock(WaitStrategy::PubSub));
        }
        let (kind, ms) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected {EXPECTED}"))?;
        let every = match ms.parse::<u64>() {
            Ok(ms) if (1..=3_600_000).contains(&ms) => Duration::from_millis(ms),
            _ => return Err(format!("{s:?}: the retry interval is 1 to 3600000 ms")),
        };
        match kind {
            "poll" => Ok(Strategy::Lock(WaitStrategy::Poll(every))),
            "bare" => Ok(Strategy::Bare(every)),
            "floor" => Ok(Strategy::Floor(every)),
            "onebyone" => Ok(Strategy::OneByOne(every)),
            _ => Err(format!("{s:?}: expected {EXPECTED}")),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Lock(WaitStrategy::Poll(d)) => write!(f, "poll:{}", d.as_millis()),
            Strategy::Bare(d) => write!(f, "bare:{}", d.as_millis()),
            Strategy::Floor(d) => write!(f, "floor:{}", d.as_millis()),
            Strategy::OneByOne(d) => write!(f, "onebyone:{}", d.as_millis()),
            Strategy::Lock(_) => f.write_str("pubsub"),
        }
    }
}

/// What the bench's workers take: `mutex` (a lock per key),
/// `semaphore:<limit>` (a semaphore of that many permits per key, one permit
/// per acquisition) or `rwlock:<read share>` (a read-write lock per key; each
/// acquisition is a read with that probability, else a write).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Primitive {
    #[default]
    Mutex,
    Semaphore(u32),
    RwLock(f64),
}

impl Primitive {
    /// How many holders may be inside one key's critical section at once.
    pub fn limit(self) -> u32 {
        match self {
            Primitive::Mutex | Primitive::RwLock(_) => 1,
            Primitive::Semaphore(n) => n,
        }
    }
}

impl FromStr for Primitive {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "mutex" => Ok(Primitive::Mutex),
            Some(("semaphore", n)) => match n.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Primitive::Semaphore(n)),
                _ => Err(format!("{s:?}: the limit is a whole number of at least 1")),
            },
            Some(("rwlock", share)) => match share.parse::<f64>() {
                Ok(x) if (0.0..=1.0).contains(&x) => Ok(Primitive::RwLock(x)),
                _ => Err(format!("{s:?}: the read share is between 0 and 1")),
            },
            _ => Err(format!(
                "{s:?}: expected mutex, semaphore:<limit> or rwlock:<read share>"
            )),
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Primitive::Mutex => f.write_str("mutex"),
            Primitive::Semaphore(n) => write!(f, "semaphore:{n}"),
            Primitive::RwLock(x) => write!(f, "rwlock:{x}"),
        }
    }
}

/// `--keys-per-lock`: how many distinct keys each acquisition takes, `N`
/// or a range `A-B` (each acquisition draws its count uniformly in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeysPerLock {
    pub min: usize,
    pub max: usize,
}

impl KeysPerLock {
    /// One key per acquisition: the single-key bench.
    pub const ONE: KeysPerLock = KeysPerLock { min: 1, max: 1 };

    /// Whether acquisitions take sets (multi-key locks).
    pub fn is_multi(self) -> bool {
        self != KeysPerLock::ONE
    }
}

impl Default for KeysPerLock {
    fn default() -> Self {
        KeysPerLock::ONE
    }
}

impl FromStr for KeysPerLock {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parse = |n: &str| n.trim().parse::<usize>().ok().filter(|n| *n >= 1);
        let (min, max) = match s.split_once('-') {
            Some((a, b)) => (parse(a), parse(b)),
            None => (parse(s), parse(s)),
        };
        match (min, max) {
            (Some(min), Some(max)) if min <= max && max <= relaylock::MAX_KEYS => {
                Ok(KeysPerLock { min, max })
            }
            _ => Err(format!(
                "{s:?}: expected N or A-B, 1 <= A <= B <= {}",
                relaylock::MAX_KEYS
            )),
        }
    }
}

impl fmt::Display for KeysPerLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives() {
        assert_eq!("mutex".parse::<Primitive>().unwrap(), Primitive::Mutex);
        assert_eq!(
            "semaphore:8".parse::<Primitive>().unwrap(),
            Primitive::Semaphore(8)
        );
        assert_eq!(Primitive::Semaphore(8).to_string(), "semaphore:8");
        assert_eq!(
            "rwlock:0.9".parse::<Primitive>().unwrap(),
            Primitive::RwLock(0.9)
        );
        assert_eq!(Primitive::RwLock(0.9).to_string(), "rwlock:0.9");
        for bad in [
            "semaphore:0",
            "semaphore:",
            "semaphore:x",
            "rwlock:1.5",
            "rwlock:",
            "",
        ] {
            assert!(bad.parse::<Primitive>().is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_per_lock() {
        assert_eq!("1".parse::<KeysPerLock>().unwrap(), KeysPerLock::ONE);
        let r = "2-8".parse::<KeysPerLock>().unwrap();
        assert_eq!((r.min, r.max), (2, 8));
        assert_eq!(r.to_string(), "2-8");
        assert!(r.is_multi());
        assert_eq!("4".parse::<KeysPerLock>().unwrap().to_string(), "4");
        for bad in ["0", "8-2", "x", "", "1-", "2-20000"] {
            assert!(bad.parse::<KeysPerLock>().is_err(), "{bad}");
        }
    }

    #[test]
    fn strategies() {
        assert_eq!(
            "pubsub".parse::<Strategy>().unwrap(),
            Strategy::Lock(WaitStrategy::PubSub)
        );
        assert_eq!(
            "poll:10".parse::<Strategy>().unwrap(),
            Strategy::Lock(WaitStrategy::Poll(Duration::from_millis(10)))
        );
        assert_eq!(
            "poll:10".parse::<Strategy>().unwrap().to_string(),
            "poll:10"
        );
        assert_eq!(
            "bare:10".parse::<Strategy>().unwrap(),
            Strategy::Bare(Duration::from_millis(10))
        );
        assert_eq!(
            "bare:10".parse::<Strategy>().unwrap().to_string(),
            "bare:10"
        );
        assert_eq!(
            "floor:10".parse::<Strategy>().unwrap(),
            Strategy::Floor(Duration::from_millis(10))
        );
        assert_eq!(
            "floor:10".parse::<Strategy>().unwrap().to_string(),
            "floor:10"
        );
        assert_eq!(
            "onebyone:20".parse::<Strategy>().unwrap(),
            Strategy::OneByOne(Duration::from_millis(20))
        );
        assert_eq!(
            "onebyone:20".parse::<Strategy>().unwrap().to_string(),
            "onebyone:20"
        );
        for bad in [
            "",
            "poll",
            "poll:0",
            "poll:x",
            "spin",
            "bare",
            "bare:0",
            "floor",
            "floor:0",
            "spin:10",
            "onebyone:0",
        ] {
            assert!(bad.parse::<Strategy>().is_err(), "{bad}");
        }
    }
}
