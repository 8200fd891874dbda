//! Pure statistics over what the load-test workers recorded.

/// One critical section, as a worker saw it. Times are nanoseconds since the
/// UNIX epoch on the machine's clock (every process of one run shares it).
/// `(key index, fencing token, lock called, lock returned, release sent)`;
/// a strategy without fencing tokens (`bare`) records when the lock was
/// taken in their place, which orders a key's critical sections the same way.
pub type Record = (u32, u64, u64, u64, u64);

/// Nearest-rank percentile of an ascending slice; `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Jain's fairness index of per-worker counts: 1 when all are equal, 1/n
/// when one worker got everything.
pub fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (n * squares)
}

/// What consecutive holders of each key reveal.
#[derive(Debug, Default, PartialEq)]
pub struct Handoffs {
    /// Release of one holder to the return of the next holder's lock call, in
    /// ms, for every pair where the next holder was already waiting.
    pub handoff_ms: Vec<f64>,
    /// Pairs where the next holder's lock returned before the previous holder
    /// sent its release. The recorded span of a critical section lies inside
    /// the real one, so every such pair is a real overlap (two holders).
    pub violations: u64,
}

/// Order each key's critical sections by fencing token and compare neighbours.
pub fn handoffs(records: &mut [Record]) -> Handoffs {
    records.sort_unstable_by_key(|r| (r.0, r.1));
    let mut out = Handoffs::default();
    for pair in records.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        if prev.0 != next.0 {
            continue;
        }
        if next.3 < prev.4 {
            out.violations += 1;
        } else if next.2 < prev.4 {
            out.handoff_ms.push((next.3 - prev.4) as f64 / 1e6);
        }
    }
    out
}

/// A read-write lock's records mark a write by this bit of the key index.
pub const WRITE_BIT: u32 = 1 << 31;

/// Entries of a read-write lock's records that broke it: a write entering
/// while anyone is inside the key, or a read while a write is. By the
/// recorded spans, each inside the real one, so every one counted is real.
pub fn rw_violations(records: &[Record]) -> u64 {
    // (key, time, step, is write); at equal times a leave comes first.
    let mut events: Vec<(u32, u64, i8, bool)> = records
        .iter()
        .flat_map(|r| {
            let (key, write) = (r.0 & !WRITE_BIT, r.0 & WRITE_BIT != 0);
            [(key, r.3, 1, write), (key, r.4, -1, write)]
        })
        .collect();
    events.sort_unstable_by_key(|e| (e.0, e.1, e.2));
    let (mut key, mut readers, mut writers, mut bad) = (u32::MAX, 0i64, 0i64, 0);
    for (k, _, step, write) in events {
        if k != key {
            (key, readers, writers) = (k, 0, 0);
        }
        if step > 0 && (writers > 0 || (write && readers > 0)) {
            bad += 1;
        }
        if write {
            writers += i64::from(step);
        } else {
            readers += i64::from(step);
        }
    }
    bad
}

/// Entries that brought more than `limit` holders inside one key's
/// critical section at once, by the recorded spans. A recorded span lies
/// inside the real one, so every excess counted here is real.
pub fn over_limit(records: &[Record], limit: u32) -> u64 {
    // (key, time, +1 enter / -1 leave); at equal times a leave comes first.
    let mut events: Vec<(u32, u64, i8)> = records
        .iter()
        .flat_map(|r| [(r.0, r.3, 1), (r.0, r.4, -1)])
        .collect();
    events.sort_unstable();
    let (mut key, mut inside, mut over) = (u32::MAX, 0i64, 0);
    for (k, _, step) in events {
        if k != key {
            (key, inside) = (k, 0);
        }
        inside += i64::from(step);
        if step > 0 && inside > i64::from(limit) {
            over += 1;
        }
    }
    over
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_violations() {
        let w = WRITE_BIT;
        let ok = [
            (0, 1, 0, 10, 20),
            (0, 2, 0, 12, 30),
            (w, 3, 0, 30, 40),
            (0, 4, 0, 40, 50),
        ];
        assert_eq!(rw_violations(&ok), 0);
        // A write inside two reads, and a read inside a write.
        let bad = [(0, 1, 0, 10, 50), (w, 2, 0, 20, 30), (0, 3, 0, 25, 26)];
        assert_eq!(rw_violations(&bad), 2);
    }

    #[test]
    fn over_the_limit() {
        // Key 0: three overlapping spans, limit 2: the third entry is over.
        let r = [
            (0, 1, 0, 10, 50),
            (0, 2, 0, 20, 60),
            (0, 3, 0, 30, 40),
            // Key 1 alone, and a span that starts when another ends.
            (1, 4, 0, 10, 20),
            (1, 5, 0, 20, 30),
        ];
        assert_eq!(over_limit(&r, 2), 1);
        assert_eq!(over_limit(&r, 3), 0);
        assert_eq!(over_limit(&r, 1), 2);
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn jain_index() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert!((jain(&[8, 0, 0, 0]) - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[0, 0]), 0.0);
    }

    #[test]
    fn handoffs_and_violations() {
        let ms = 1_000_000;
        let mut r = vec![
            // key 0: A holds 0..10, B waits from 5, gets it at 12 (handoff 2 ms)
            (0, 2, 5 * ms, 12 * ms, 20 * ms),
            (0, 1, 0, ms, 10 * ms),
            // C called after B released: not a handoff
            (0, 3, 25 * ms, 26 * ms, 30 * ms),
            // D acquired before C released: a violation
            (0, 4, 26 * ms, 29 * ms, 31 * ms),
            // key 1 is independent of key 0
            (1, 1, 0, 0, ms),
        ];
        let h = handoffs(&mut r);
        assert_eq!(h.handoff_ms, vec![2.0]);
        assert_eq!(h.violations, 1);
    }
}
