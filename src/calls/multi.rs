//! The multi-key calls: one [`ACQUIRE_ALL`](crate::scripts::ACQUIRE_ALL)
//! or [`RELEASE_ALL`](crate::scripts::RELEASE_ALL) per slot group of a
//! multi-key lock, and their replies, typed.

use std::time::Duration;

use fred::bytes_utils::Str;
use fred::types::{Key, Value};

use super::{release_reply, Calls, Released};
use crate::error::{Error, Result};
use crate::scripts::{Names, HANDOFF_GRACE_MS};

/// What one multi-key acquire call did, key by key in the order sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TakenRun {
    /// The keys taken, from the first: each one's fence, and the lease's
    /// remaining time for a replayed take (`None`: the whole lease runs from
    /// when the call was sent).
    pub(crate) taken: Vec<(u64, Option<Duration>)>,
    /// The first key not taken, if the call stopped early: how long, at
    /// most, its current holder keeps it (`None` when unknown).
    pub(crate) busy: Option<Option<Duration>>,
}

impl Calls {
    /// One multi-key acquire of `group` (one slot's keys in order), with
    /// one `token` for every key; bounded by `within` (fred's own timeout),
    /// so a call cut off is never written later.
    pub(crate) async fn acquire_all(
        &self,
        group: &[&Names],
        token: &Str,
        lease_ms: u64,
        within: Option<Duration>,
    ) -> Result<TakenRun> {
        let reply: Vec<i64> = self
            .script_within(&self.scripts.acquire_all, within, || {
                let keys: Vec<Key> = group.iter().map(|n| Key::from(&n.lock)).collect();
                let args = vec![
                    Value::String(token.clone()),
                    (lease_ms as i64).into(),
                    self.publish.clone(),
                    (self.side_retention_ms as i64).into(),
                ];
                (keys, args)
            })
            .await?;
        taken_run(&reply, group.len())
    }

    /// One multi-key release of `group` (one slot's keys), `fences` (`None`:
    /// unknown, an acquisition abandoned in flight) and `requeue` (whether
    /// this client still has local waiters of the key) for each key in
    /// order. Each key's outcome, with whether this client
    /// is the stand-by of a hand-over to another client (as
    /// [`release`](Calls::release) tells it).
    pub(crate) async fn release_all(
        &self,
        group: &[&Names],
        token: &Str,
        fences: &[Option<u64>],
        requeue: &[bool],
        client: &Str,
    ) -> Result<Vec<(Released, bool)>> {
        let flags: String = requeue.iter().map(|&r| if r { '1' } else { '0' }).collect();
        let reply: Vec<i64> = self
            .script(&self.redis, &self.scripts.release_all, || {
                let keys: Vec<Key> = group.iter().map(|n| Key::from(&n.lock)).collect();
                let mut args = Vec::with_capacity(6 + fences.len());
                args.extend([
                    Value::String(token.clone()),
                    (self.side_retention_ms as i64).into(),
                    Value::String(client.clone()),
                    (HANDOFF_GRACE_MS as i64).into(),
                    self.publish.clone(),
                    flags.as_str().into(),
                ]);
                // `''`: an acquisition abandoned in flight (its token is
                // voided on that key).
                args.extend(fences.iter().map(|f| match f {
                    Some(f) => Value::Integer(*f as i64),
                    None => Value::String(Str::from_static("")),
                }));
                (keys, args)
            })
            .await?;
        if reply.len() != group.len() {
            return Err(Error::UnexpectedReply(format!(
                "a multi-key release of {} keys replied {reply:?}",
                group.len()
            )));
        }
        reply
            .iter()
            .map(|&code| Ok((release_reply(&[code])?, code == 5)))
            .collect()
    }
}

/// Read a multi-key acquire's reply for `sent` keys (see
/// [`ACQUIRE_ALL`](crate::scripts::ACQUIRE_ALL)).
fn taken_run(reply: &[i64], sent: usize) -> Result<TakenRun> {
    let bad = || Error::UnexpectedReply(format!("a multi-key acquire replied {reply:?}"));
    if !reply.len().is_multiple_of(2) || reply.len() / 2 > sent || reply.is_empty() {
        return Err(bad());
    }
    let mut run = TakenRun {
        taken: Vec::with_capacity(reply.len() / 2),
        busy: None,
    };
    for pair in reply.chunks(2) {
        match *pair {
            [fence, left] if fence > 0 && run.busy.is_none() => {
                let left = (left >= 0).then(|| Duration::from_millis(left as u64));
                run.taken.push((fence as u64, left));
            }
            [code, 0] if code < 0 && run.busy.is_none() => {
                // `-3 - pttl`: the key's PTTL, or -1 (no expiry), -2 (our
                // voided token): no bound known.
                let pttl = -3 - code;
                run.busy = Some((pttl >= 0).then(|| Duration::from_millis(pttl as u64)));
            }
            _ => return Err(bad()),
        }
    }
    if run.busy.is_none() && run.taken.len() != sent {
        return Err(bad());
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_key_reply_reads_as_taken_then_busy() {
        let run = taken_run(&[17, -1, 19, 250, -1003, 0], 4).unwrap();
        assert_eq!(
            run.taken,
            vec![(17, None), (19, Some(Duration::from_millis(250)))]
        );
        assert_eq!(run.busy, Some(Some(Duration::from_millis(1000))));
        let all = taken_run(&[5, -1, 6, -1], 2).unwrap();
        assert_eq!(all.busy, None);
        assert_eq!(taken_run(&[-2, 0], 3).unwrap().busy, Some(None));
        assert_eq!(taken_run(&[-1, 0], 3).unwrap().busy, Some(None));
        // Malformed: short of the keys sent, odd, a key after the busy one.
        assert!(taken_run(&[5, -1], 2).is_err());
        assert!(taken_run(&[5], 1).is_err());
        assert!(taken_run(&[-5, 0, 7, -1], 2).is_err());
        assert!(taken_run(&[], 1).is_err());
    }
}
