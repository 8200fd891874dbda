//! The semaphore's scripts, called directly against a real redis-server:
//! admission by the caller's limit, FIFO across clients, expiry by the
//! server's clock, replays, fences, at most one reservation per freed
//! permit, and abandoned acquisitions. The read-write lock's scripts are
//! the same (docs/design-semaphore-rwlock.md); tests/semaphore.rs and
//! tests/rwlock.rs test the client API built on them.

use relaylock_testkit as support;

use std::time::Duration;

use fred::prelude::*;
use relaylock::__scripts::{
    HANDOFF_GRACE_MS, RING_CHARS, SEM_ACQUIRE, SEM_LEAVE, SEM_RELEASE, SEM_RENEW, SIDE_RETENTION_MS,
};
use support::{Admin, RedisServer};

const META: &str = "t:2:{s}:sem";

fn keys(token: &str) -> Vec<String> {
    vec![
        META.into(),
        format!("{META}:h"),
        format!("{META}:t"),
        format!("{META}:void:{token}"),
        format!("{META}:void"),
    ]
}

struct Sem {
    admin: Client,
}

impl Sem {
    async fn acquire(
        &self,
        token: &str,
        n: u32,
        limit: u32,
        lease_ms: u64,
        client: &str,
    ) -> Vec<i64> {
        let args: Vec<String> = vec![
            token.into(),
            n.to_string(),
            limit.to_string(),
            lease_ms.to_string(),
            client.into(),
            SIDE_RETENTION_MS.to_string(),
            format!("{META}:ch"),
            "PUBLISH".into(),
            HANDOFF_GRACE_MS.to_string(),
        ];
        self.admin
            .eval::<Vec<i64>, _, _, _>(SEM_ACQUIRE, keys(token), args)
            .await
            .unwrap()
    }

    async fn release(&self, token: &str, fence: Option<i64>, client: &str) -> Vec<i64> {
        self.release_requeue(token, fence, client, None).await
    }

    /// With `requeue`: the releasing client's next local waiter's n and
    /// limit.
    async fn release_requeue(
        &self,
        token: &str,
        fence: Option<i64>,
        client: &str,
        requeue: Option<(u32, u32)>,
    ) -> Vec<i64> {
        let (flag, n, limit) = match requeue {
            Some((n, limit)) => ("1", n, limit),
            None => ("0", 1, 1),
        };
        let args: Vec<String> = vec![
            token.into(),
            fence.map_or_else(String::new, |f| f.to_string()),
            format!("{META}:ch"),
            SIDE_RETENTION_MS.to_string(),
            RING_CHARS.to_string(),
            client.into(),
            HANDOFF_GRACE_MS.to_string(),
            "PUBLISH".into(),
            flag.into(),
            n.to_string(),
            limit.to_string(),
        ];
        self.admin
            .eval::<Vec<i64>, _, _, _>(SEM_RELEASE, keys(token), args)
            .await
            .unwrap()
    }

    /// `used` and the queue, from the value.
    async fn state(&self) -> (u64, String) {
        let v: String = self.admin.get(META).await.unwrap();
        let f: Vec<&str> = v.split('|').collect();
        assert_eq!(f.len(), 5, "{v}");
        (f[0].parse().unwrap(), f[2].to_owned())
    }

    async fn reservation(&self, client: &str) -> Option<String> {
        self.admin
            .hget(format!("{META}:t"), format!("~{client}"))
            .await
            .unwrap()
    }
}

async fn sem() -> (RedisServer, Sem) {
    let server = RedisServer::start();
    let admin = server.admin().await;
    (server, Sem { admin })
}

/// Permits are admitted up to the limit in queue order (a caller that needs
/// few never overtakes a queued one that needs many); a release reserves
/// the freed permits for the queued clients in order; a caller that will
/// not wait is not queued; a reservation nobody takes lapses after the
/// grace.
#[tokio::test]
async fn permits_are_admitted_up_to_the_limit_in_queue_order() {
    let (_server, s) = sem().await;
    let a = s.acquire("ta", 3, 4, 10_000, "a").await;
    assert_eq!(a[0], 1);
    // b needs 3 of the 1 left: queued.
    assert_eq!(s.acquire("tb", 3, 4, 10_000, "b").await[0], 0);
    // c needs 1, and 1 is free, but b waits first: c is not admitted (no
    // overtaking of a waiter that needs many by callers that need few).
    assert_eq!(s.acquire("tc", 1, 4, 10_000, "c").await[0], 0);
    assert_eq!(s.state().await, (3, "b:3:4,c:1:4".into()));
    // Releasing a's 3 leaves 4 free: reserved for b (3), then c (1), in
    // queue order; two clients are told.
    assert_eq!(s.release("ta", Some(a[1]), "a").await, vec![1, 2, 2]);
    assert_eq!(s.reservation("b").await.as_deref(), Some("3"));
    assert_eq!(s.reservation("c").await.as_deref(), Some("1"));
    assert_eq!(s.state().await, (4, String::new()));
    // Nobody else gets in while the reservations stand.
    assert_eq!(s.acquire("te", 1, 4, 10_000, "e").await[0], 0);
    assert_eq!(s.state().await, (4, "e:1:4".into()));
    // b and c take their reservations.
    let b = s.acquire("tb", 3, 4, 10_000, "b").await;
    assert_eq!(b[0], 1);
    assert!(b[1] > a[1], "fences increase");
    assert_eq!(s.reservation("b").await, None);
    let c = s.acquire("tc", 1, 4, 10_000, "c").await;
    assert_eq!(c[0], 1);
    assert!(c[1] > b[1]);
    assert_eq!(s.state().await, (4, "e:1:4".into()));
    // A release that frees 1 goes to e, the only one queued, and no further.
    assert_eq!(s.release("tc", Some(c[1]), "c").await, vec![1, 1, 2]);
    assert_eq!(s.acquire("te", 1, 4, 10_000, "e").await[0], 1);
    assert_eq!(s.state().await, (4, String::new()));
    // A caller that will not wait ('' client) is refused and not queued.
    assert_eq!(s.acquire("td", 1, 4, 10_000, "").await[0], 0);
    assert_eq!(s.state().await, (4, String::new()));
    // A reservation nobody takes lapses after the grace, by the server
    // clock, and its permits come back.
    assert_eq!(s.acquire("tf", 1, 4, 10_000, "f").await[0], 0);
    assert_eq!(s.release("te", None, "e").await, vec![1, 1, 2]);
    tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS + 30)).await;
    assert_eq!(s.acquire("tg", 1, 4, 10_000, "").await[0], 1);
}

/// A release that frees k permits reserves for at most k clients; its
/// replay is recognised and frees nothing twice.
#[tokio::test]
async fn a_release_that_frees_k_permits_reserves_for_at_most_k_clients() {
    let (_server, s) = sem().await;
    let h1 = s.acquire("h1", 1, 2, 10_000, "x").await;
    let _h2 = s.acquire("h2", 1, 2, 10_000, "x").await;
    for c in ["p", "q", "r"] {
        assert_eq!(s.acquire(&format!("t{c}"), 1, 2, 10_000, c).await[0], 0);
    }
    assert_eq!(s.release("h1", Some(h1[1]), "x").await, vec![1, 1, 0]);
    assert_eq!(s.reservation("p").await.as_deref(), Some("1"));
    assert_eq!(s.reservation("q").await, None);
    assert_eq!(s.state().await, (2, "q:1:2,r:1:2".into()));
    // A replayed release is recognised, and frees nothing twice.
    assert_eq!(s.release("h1", Some(h1[1]), "x").await, vec![2, 0]);
    assert_eq!(s.state().await.0, 2);
}

/// A crashed holder's permits come back when its lease ends by the server
/// clock (a refused try is told the soonest expiry); its late release is a
/// loss, not a second free.
#[tokio::test]
async fn expired_holds_come_back_by_the_server_clock() {
    let (_server, s) = sem().await;
    let crashed = s.acquire("crashed", 2, 2, 100, "a").await;
    assert_eq!(crashed[0], 1);
    let refused = s.acquire("w", 1, 2, 10_000, "b").await;
    assert_eq!(refused[0], 0);
    assert!(
        (1..=100).contains(&refused[1]),
        "the bound is the soonest expiry: {refused:?}"
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let w = s.acquire("w", 1, 2, 10_000, "b").await;
    assert_eq!(w[0], 1, "the crashed holder's permits did not come back");
    assert!(w[1] > crashed[1]);
    assert_eq!(s.state().await, (1, String::new()));
    // The crashed holder's late release is a loss, not a second free.
    assert_eq!(
        s.release("crashed", Some(crashed[1]), "a").await,
        vec![0, 2]
    );
    assert_eq!(s.state().await.0, 1);
}

/// A replayed acquisition returns the same fence and takes nothing twice;
/// each caller is admitted by its own limit; more permits than the limit is
/// an error, not a wait.
#[tokio::test]
async fn replays_and_disagreeing_limits() {
    let (_server, s) = sem().await;
    let a = s.acquire("a", 6, 8, 10_000, "a").await;
    // fred replaying the same call: the same fence, nothing taken twice.
    assert_eq!(s.acquire("a", 6, 8, 10_000, "a").await[..2], a[..2]);
    assert_eq!(s.state().await.0, 6);
    // Each caller's limit applies to its own admission: under limit 4 the
    // 6 held leave nothing; under limit 8 there are 2.
    assert_eq!(s.acquire("small", 1, 4, 10_000, "").await[0], 0);
    assert_eq!(s.acquire("big", 2, 8, 10_000, "").await[0], 1);
    assert_eq!(s.state().await.0, 8);
    // More permits than the limit is an error, not a wait.
    let bad: Result<Vec<i64>, _> = s
        .admin
        .eval(
            SEM_ACQUIRE,
            keys("x"),
            vec!["x", "5", "4", "1000", "", "60000"],
        )
        .await;
    assert!(bad.is_err());
}

/// An abandoned acquisition's release voids its token: a late copy of it
/// never takes a permit, whether it was abandoned before reaching Redis or
/// after taking permits.
#[tokio::test]
async fn an_abandoned_acquisition_never_takes_a_permit_later() {
    let (_server, s) = sem().await;
    // Abandoned before it reached Redis: its release voids the token.
    assert_eq!(s.release("ghost", None, "a").await, vec![0, 2]);
    assert_eq!(s.acquire("ghost", 1, 4, 10_000, "a").await, vec![0, -2]);
    assert_eq!(s.state().await.0, 0);
    // Abandoned after it took a permit: released, and voided as well.
    let late = s.acquire("late", 2, 4, 10_000, "a").await;
    assert_eq!(late[0], 1);
    assert_eq!(s.release("late", None, "a").await, vec![1, 0, 2]);
    assert_eq!(s.state().await.0, 0);
    assert_eq!(s.acquire("late", 2, 4, 10_000, "a").await, vec![0, -2]);
}

/// A queue head whose client is gone (its waiter gave up, or its process
/// died) does not stall the semaphore.
#[tokio::test]
async fn a_queue_head_that_is_gone_does_not_stall_the_semaphore() {
    let (_server, s) = sem().await;
    // Client c holds the only permit; its second waiter queues c, then b
    // queues; c's second waiter gives up (abandoned, no hold).
    let w1 = s.acquire("w1", 1, 1, 10_000, "c").await;
    assert_eq!(s.acquire("w2", 1, 1, 10_000, "c").await[0], 0);
    assert_eq!(s.acquire("tb", 1, 1, 10_000, "b").await[0], 0);
    assert_eq!(s.state().await, (1, "c:1:1,b:1:1".into()));
    assert_eq!(s.release("w2", None, "c").await, vec![0, 0]);
    // c's release without local waiters left takes c out of the queue and
    // hands the permit to b.
    assert_eq!(s.release("w1", Some(w1[1]), "c").await, vec![1, 1, 2]);
    assert_eq!(s.reservation("b").await.as_deref(), Some("1"));
    assert_eq!(s.acquire("tb", 1, 1, 10_000, "b").await[0], 1);

    // A queued client that dies while the holder's permit runs out: the
    // next caller's own acquire hands the returned permit to the head (its
    // reservation lapses unused after the grace), then takes it.
    let (_server, s) = sem().await;
    let h = s.acquire("h", 1, 1, 100, "holder").await;
    assert_eq!(h[0], 1);
    assert_eq!(s.acquire("dead", 1, 1, 10_000, "dead").await[0], 0);
    assert_eq!(s.acquire("alive", 1, 1, 10_000, "alive").await[0], 0);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let r = s.acquire("alive", 1, 1, 10_000, "alive").await;
    assert_eq!(r[0], 0, "the head comes first");
    assert_eq!(s.reservation("dead").await.as_deref(), Some("1"));
    tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS + 30)).await;
    assert_eq!(s.acquire("alive", 1, 1, 10_000, "alive").await[0], 1);
}

/// A refused replay of an abandoned acquisition still saves the cut of
/// expired holds, or their permits would leak for good.
#[tokio::test]
async fn a_refused_abandoned_token_still_saves_the_cut() {
    let (_server, s) = sem().await;
    assert_eq!(s.acquire("short", 2, 2, 100, "").await[0], 1);
    assert_eq!(s.release("ghost", None, "a").await, vec![0, 2]);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(s.acquire("ghost", 1, 2, 10_000, "a").await, vec![0, -2]);
    assert_eq!(s.state().await.0, 0, "the expired permits leaked");
    assert_eq!(s.acquire("next", 2, 2, 10_000, "").await[0], 1);
}

/// A release with requeue by a client already queued keeps
/// one entry for it, at the back; and a reservation smaller than a waiter's
/// need is not a way around the queue.
#[tokio::test]
async fn requeues_keep_one_entry_and_small_reservations_do_not_overtake() {
    let (_server, s) = sem().await;
    let y = s.acquire("ty", 3, 4, 10_000, "y").await;
    let x = s.acquire("tx", 1, 4, 10_000, "x").await;
    assert_eq!(s.acquire("tb", 4, 4, 10_000, "b").await[0], 0);
    assert_eq!(s.acquire("tx2", 1, 4, 10_000, "x").await[0], 0);
    assert_eq!(s.state().await, (4, "b:4:4,x:1:4".into()));
    assert_eq!(
        s.release_requeue("tx", Some(x[1]), "x", Some((1, 4))).await,
        vec![1, 0, 0]
    );
    assert_eq!(s.state().await, (3, "b:4:4,x:1:4".into()));
    // y's release frees 3: b (needs 4) fits and is reserved; x stays behind.
    assert_eq!(s.release("ty", Some(y[1]), "y").await, vec![1, 1, 0]);
    assert_eq!(s.state().await, (4, "x:1:4".into()));

    // A reservation of 1 does not let a waiter that needs 3 skip the queue.
    let (_server, s) = sem().await;
    let h1 = s.acquire("h1", 1, 4, 10_000, "p").await;
    let _h2 = s.acquire("h2", 3, 4, 10_000, "q").await;
    assert_eq!(s.acquire("tx", 1, 4, 10_000, "x").await[0], 0);
    assert_eq!(s.acquire("ty", 3, 4, 10_000, "y").await[0], 0);
    assert_eq!(s.release("h1", Some(h1[1]), "p").await, vec![1, 1, 0]);
    assert_eq!(s.reservation("x").await.as_deref(), Some("1"));
    assert_eq!(s.acquire("big", 3, 4, 10_000, "x").await[0], 0);
    // The reservation x could not use passed on at once: y
    // (3 of the 1 free) still does not fit, and x queues behind it.
    assert_eq!(s.reservation("x").await, None);
    assert_eq!(s.state().await, (3, "y:3:4,x:3:4".into()));
}

/// A renewal extends a live hold by the server clock; an expired hold stays
/// expired (its permits are free), and a renewal never brings it back.
#[tokio::test]
async fn renewals_extend_live_holds_only() {
    let (_server, s) = sem().await;
    let renew = |token: &'static str, lease: u64, grow: bool| {
        let admin = s.admin.clone();
        async move {
            let args: Vec<String> = vec![
                if grow { "1" } else { "0" }.into(),
                SIDE_RETENTION_MS.to_string(),
                token.into(),
                lease.to_string(),
            ];
            let codes = admin
                .eval::<Vec<i64>, _, _, _>(SEM_RENEW, keys(token)[..3].to_vec(), args)
                .await
                .unwrap();
            assert_eq!(codes.len(), 1);
            codes[0]
        }
    };
    assert_eq!(s.acquire("h", 1, 1, 200, "").await[0], 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(renew("h", 1_000, false).await, 1);
    // Grow-only never shortens it.
    assert_eq!(renew("h", 10, true).await, 1);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        s.acquire("other", 1, 1, 10_000, "").await[0],
        0,
        "the renewed hold expired at its first lease"
    );
    // A hold that expired is not renewed, and its permit comes back.
    assert_eq!(s.acquire("brief", 1, 2, 100, "").await[0], 1);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(renew("brief", 10_000, false).await, 0);
    assert_eq!(s.acquire("again", 1, 2, 10_000, "").await[0], 1);
    assert_eq!(renew("never-held", 10_000, false).await, 0);

    // A batch: one code per hold, in order; each hold's own names.
    let (_server2, other) = sem().await;
    let a = other.acquire("a", 1, 2, 10_000, "").await;
    assert_eq!(a[0], 1);
    let mut names = keys("a")[..3].to_vec();
    names.extend(keys("b")[..3].to_vec());
    let args: Vec<String> = vec![
        "0".into(),
        SIDE_RETENTION_MS.to_string(),
        "a".into(),
        "20000".into(),
        "b".into(),
        "20000".into(),
    ];
    let codes: Vec<i64> = other
        .admin
        .eval(SEM_RENEW, names.clone(), args)
        .await
        .unwrap();
    assert_eq!(codes, vec![1, 0]);
    // A malformed batch is an error reply, not a partial renewal.
    let bad: Result<Vec<i64>, _> = other
        .admin
        .eval(SEM_RENEW, names, vec!["0", "1000", "a", "x", "b", "1"])
        .await;
    assert!(bad.is_err());
}

/// Mode `'2'`, the write a `min_replicas` check waits for: it renews only
/// the hold whose facts are exactly `<n>:<fence>` (the same token with
/// another fence, or other permits, is not this acquisition), never moves
/// its expiry or its names' TTLs earlier, and always writes.
#[tokio::test]
async fn the_replica_check_write_matches_the_facts_and_never_shortens() {
    let (_server, s) = sem().await;
    let confirm = |hold: String, lease: u64| {
        let admin = s.admin.clone();
        async move {
            let args: Vec<String> = vec![
                "2".into(),
                SIDE_RETENTION_MS.to_string(),
                hold,
                lease.to_string(),
            ];
            admin
                .eval::<Vec<i64>, _, _, _>(SEM_RENEW, keys("h")[..3].to_vec(), args)
                .await
                .unwrap()
        }
    };
    let got = s.acquire("h", 2, 3, 30_000, "").await;
    assert_eq!(got[0], 1);
    let fence = got[1];
    let expiry = |admin: Client| async move {
        admin
            .zscore::<f64, _, _>(format!("{META}:h"), "h")
            .await
            .unwrap()
    };
    let before = expiry(s.admin.clone()).await;
    let pttl_before: i64 = s.admin.pttl(META).await.unwrap();
    let calls = |admin: Client| async move { support::command_calls(&admin).await };
    let c0 = calls(s.admin.clone()).await;
    assert_eq!(confirm(format!("h|2:{fence}"), 1_000).await, [1]);
    let c1 = calls(s.admin.clone()).await;
    assert!(support::delta(&c0, &c1, "pexpire") >= 1, "it always writes");
    assert!(expiry(s.admin.clone()).await >= before, "never earlier");
    let pttl_after: i64 = s.admin.pttl(META).await.unwrap();
    assert!(
        pttl_after >= pttl_before - 50,
        "{pttl_before} -> {pttl_after}"
    );
    assert_eq!(confirm(format!("h|2:{fence}"), 60_000).await, [1]);
    assert!(
        expiry(s.admin.clone()).await >= before + 29_000.0,
        "at least the lease"
    );

    assert_eq!(
        confirm(format!("h|2:{}", fence + 1), 60_000).await,
        [0],
        "another fence"
    );
    assert_eq!(
        confirm(format!("h|1:{fence}"), 60_000).await,
        [0],
        "other permits"
    );
    assert_eq!(confirm("h".to_owned(), 60_000).await, [0], "no facts given");
    assert_eq!(s.release("h", Some(fence), "").await[0], 1);
    assert_eq!(
        confirm(format!("h|2:{fence}"), 60_000).await,
        [0],
        "released"
    );
}

/// The releasing client's own queue entry is served in its turn like any
/// other, without a message: the release reserves for it and says so
/// (`fits` 3: reserved, and nobody else queued; 1: reserved, others
/// queued), so the local waiter it wakes takes the permit, and no other
/// client's release can reserve the same permits for it again.
#[tokio::test]
async fn a_release_serves_its_own_client_in_turn_without_a_message() {
    let (_server, s) = sem().await;
    let h = s.acquire("h", 1, 1, 10_000, "p").await;
    assert_eq!(s.acquire("w", 1, 1, 10_000, "p").await[0], 0);
    assert_eq!(s.state().await, (1, "p:1:1".into()));
    assert_eq!(
        s.release_requeue("h", Some(h[1]), "p", Some((1, 1))).await,
        vec![1, 0, 3]
    );
    assert_eq!(s.reservation("p").await.as_deref(), Some("1"));
    assert_eq!(s.state().await, (1, String::new()));
    // Another client cannot take the reserved permit.
    assert_eq!(s.acquire("q", 1, 1, 10_000, "q").await[0], 0);
    // p's waiter takes it; nothing is left reserved.
    let w = s.acquire("w", 1, 1, 10_000, "p").await;
    assert_eq!((w[0], w[2]), (1, 0));
    assert_eq!(s.reservation("p").await, None);
    // Behind another client, the own entry waits its turn: q (queued
    // first) is served before p.
    assert_eq!(s.acquire("w2", 1, 1, 10_000, "p").await[0], 0);
    assert_eq!(s.state().await, (1, "q:1:1,p:1:1".into()));
    assert_eq!(
        s.release_requeue("w", Some(w[1]), "p", Some((1, 1))).await,
        vec![1, 1, 0]
    );
    assert_eq!(s.reservation("q").await.as_deref(), Some("1"));
    assert_eq!(s.state().await, (1, "p:1:1".into()));
}

/// A refused try's bound leaves out other clients'
/// reservations (their messages arm grace timers), or every waiting client
/// would re-check every 50 ms while any reservation is live.
#[tokio::test]
async fn a_refusal_is_bounded_by_the_holds_not_by_others_reservations() {
    let (_server, s) = sem().await;
    assert_eq!(s.acquire("x", 1, 2, 10_000, "").await[0], 1);
    let p = s.acquire("p", 1, 2, 10_000, "p").await;
    assert_eq!(s.acquire("q", 1, 2, 10_000, "q").await[0], 0);
    assert_eq!(s.release("p", Some(p[1]), "p").await, vec![1, 1, 2]);
    assert_eq!(s.reservation("q").await.as_deref(), Some("1"));
    let r = s.acquire("r", 1, 2, 10_000, "r").await;
    assert_eq!(r[0], 0);
    assert!(r[1] > 9_000, "bound {} ms: a reservation's grace", r[1]);
    // q takes its reservation; r, refused, is bounded by the holds.
    let q = s.acquire("q2", 1, 2, 10_000, "q").await;
    let r2 = s.acquire("r2", 1, 2, 10_000, "r").await;
    assert_eq!(q[0], 1, "q takes its reservation");
    assert_eq!(r2[0], 0);
    assert!(r2[1] > 9_000, "bound {} ms", r2[1]);
    assert_eq!(s.release("q2", Some(q[1]), "q").await, vec![1, 1, 2]);
    assert_eq!(s.reservation("r").await.as_deref(), Some("1"));
    let own = s.acquire("r3", 2, 2, 10_000, "r").await;
    // r needs 2 of which 1 is reserved: that reservation is no use to it
    // and passes on; nobody else waits, so the 1 is free again,
    // and r's bound is the hold's (x) again.
    assert_eq!(own[0], 0, "r needs 2 and x holds 1");
    assert_eq!(s.reservation("r").await, None);
    assert!(own[1] > 9_000, "bound {} ms", own[1]);
}

/// A batch: an admitted caller takes permits for other tokens of its client
/// in the same call, from what is left of its reservation (or, admitted
/// without one, from free permits); a replay returns the same fences; a
/// voided token gets none.
#[tokio::test]
async fn a_batch_takes_permits_for_other_tokens_in_one_call() {
    let (_server, s) = sem().await;
    let call = |token: &'static str, extra: Vec<&'static str>| {
        let admin = s.admin.clone();
        async move {
            let mut args: Vec<String> = vec![
                token.into(),
                "1".into(),
                "4".into(),
                "10000".into(),
                "c".into(),
                SIDE_RETENTION_MS.to_string(),
                format!("{META}:ch"),
                "PUBLISH".into(),
                HANDOFF_GRACE_MS.to_string(),
                "0".into(),
                "1".into(),
                "".into(),
                "0".into(),
            ];
            for t in extra {
                args.push(t.into());
                args.push("10000".into());
            }
            admin
                .eval::<Vec<i64>, _, _, _>(SEM_ACQUIRE, keys(token), args)
                .await
                .unwrap()
        }
    };
    // Free permits, nobody queued: the caller and two more, three fences.
    // Reply: {1, fence, left, remaining, f2, remaining2, f3, remaining3}.
    let r = call("a", vec!["b", "d"]).await;
    assert_eq!(r.len(), 8, "{r:?}");
    assert_eq!(r[0], 1);
    assert!(
        r[4] > r[1] && r[6] > r[4],
        "fresh, increasing fences: {r:?}"
    );
    assert_eq!((r[3], r[5], r[7]), (10_000, 10_000, 10_000));
    assert_eq!(s.state().await.0, 3);
    // A replay of the same call: the same fences, nothing taken twice, and
    // the holds' remaining time (no more than their lease).
    let again = call("a", vec!["b", "d"]).await;
    assert_eq!((again[1], again[4], again[6]), (r[1], r[4], r[6]));
    assert!(again[3] <= 10_000 && again[5] <= 10_000 && again[3] > 9_000);
    assert_eq!(s.state().await.0, 3);
    // Only one permit left: the caller takes it, the extra gets 0.
    let r = call("e", vec!["f"]).await;
    assert_eq!((r[0], r[4], r[5]), (1, 0, 0), "{r:?}");
    assert_eq!(s.state().await.0, 4);
    // A voided token never gets a permit through a batch either.
    assert_eq!(s.release("a", Some(4242), "c").await[0], 0);
    let ra = call("a", vec![]).await;
    assert_eq!(ra[0], 1, "a replay still");
    assert_eq!(s.release("ghost", None, "c").await[0], 0);
    let fence_a = call("a", vec![]).await[1];
    assert_eq!(s.release("a", Some(fence_a), "c").await[0], 1);
    let r = call("g", vec!["ghost"]).await;
    assert_eq!((r[0], r[4]), (1, 0), "a voided token took a permit: {r:?}");
}

/// A client's reservation that the waiter it woke cannot
/// use (it needs more) passes on at once, in queue order, instead of
/// blocking the clients behind until its grace lapses.
#[tokio::test]
async fn a_reservation_too_small_for_its_waiter_passes_on_at_once() {
    let (_server, s) = sem().await;
    // x holds all 3; a (needing 1) and then c (needing 3) queue.
    assert_eq!(s.acquire("th", 3, 3, 10_000, "x").await[0], 1);
    assert_eq!(s.acquire("ta", 1, 3, 10_000, "a").await[0], 0);
    assert_eq!(s.acquire("tc", 3, 3, 10_000, "c").await[0], 0);
    assert_eq!(s.state().await, (3, "a:1:3,c:3:3".into()));
    // x's release reserves 1 for a; c, needing 3, stays blocked.
    let fence = s
        .admin
        .hget::<String, _, _>(format!("{META}:t"), "th")
        .await
        .unwrap();
    let fence: i64 = fence.split(':').nth(1).unwrap().parse().unwrap();
    assert_eq!(s.release("th", Some(fence), "x").await[0], 1);
    assert_eq!(s.reservation("a").await.as_deref(), Some("1"));
    assert_eq!(s.state().await, (1, "c:3:3".into()));
    // a's waiter needs 3: the reservation of 1 is no use to it. It passes
    // on at once: c (first in line) now fits and is reserved all 3, and a
    // queues behind it.
    assert_eq!(s.acquire("ta3", 3, 3, 10_000, "a").await[0], 0);
    assert_eq!(
        s.reservation("a").await,
        None,
        "a's reservation lapses at once"
    );
    assert_eq!(s.reservation("c").await.as_deref(), Some("3"));
    assert_eq!(s.state().await, (3, "a:3:3".into()));
}

/// `SEM_LEAVE` follows the lock's `LEAVE` rule. A live
/// reservation of the leaving client is freed at once (and walked on to
/// the clients behind) only when the client says no local waiter of it
/// came back (`free` 1): a waiter that came meanwhile may have made it,
/// and a delayed leave must not take it from that waiter.
#[tokio::test]
async fn a_leaving_clients_reservation_is_freed_only_when_nobody_came_back() {
    let (_server, s) = sem().await;
    let leave = |client: &'static str, free: &'static str| {
        let admin = s.admin.clone();
        async move {
            let args: Vec<String> = vec![
                client.into(),
                format!("{META}:ch"),
                "PUBLISH".into(),
                HANDOFF_GRACE_MS.to_string(),
                String::new(),
                free.into(),
            ];
            admin
                .eval::<i64, _, _, _>(SEM_LEAVE, keys("none"), args)
                .await
                .unwrap()
        }
    };
    // x holds 2 of 2; a then b queue for 2 each; x's release reserves both
    // for a.
    let x = s.acquire("tx", 2, 2, 10_000, "x").await;
    assert_eq!(s.acquire("ta", 2, 2, 10_000, "a").await[0], 0);
    assert_eq!(s.acquire("tb", 2, 2, 10_000, "b").await[0], 0);
    assert_eq!(s.release("tx", Some(x[1]), "x").await[0], 1);
    assert_eq!(s.reservation("a").await.as_deref(), Some("2"));
    // A leave sent while a waiter of a had come back keeps it.
    assert_eq!(leave("a", "0").await, 0);
    assert_eq!(s.reservation("a").await.as_deref(), Some("2"));
    assert_eq!(s.state().await, (2, "b:2:2".into()));
    // With nobody left: it is nobody's, and b, next in line, gets it now.
    assert_eq!(leave("a", "1").await, 1);
    assert_eq!(s.reservation("a").await, None);
    assert_eq!(s.reservation("b").await.as_deref(), Some("2"));
    assert_eq!(s.state().await, (2, String::new()));
}
