//! `relaylock status` against a real redis-server (and a real cluster):
//! what it reports is what the clients did, it scans the prefix when given
//! no key, works under the read-only ACL docs/security.md documents, and says so when
//! it lacks a permission.

use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::CustomCommand;
use relaylock::{LockClient, SemaphoreOptions};
use relaylock_testkit::cluster::RedisCluster;
use relaylock_testkit::{self as support, Admin, RedisServer};
use serde_json::Value as Json;

mod common;

/// `relaylock status <args>`: exit status, stdout, stderr.
async fn status(url: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["status", "--url", url];
    all.extend_from_slice(args);
    common::relaylock(&all).await
}

async fn status_json(url: &str, args: &[&str]) -> Json {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = status(url, &all).await;
    assert_eq!(code, 0, "status failed: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn state<'a>(doc: &'a Json, key: &str, primitive: &str) -> &'a Json {
    doc["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == key)
        .and_then(|k| {
            k["states"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["primitive"] == primitive)
        })
        .unwrap_or_else(|| panic!("no {primitive} {key} in {doc}"))
}

/// A held lock with two clients queued: the holder's token, fence and
/// remaining lease, the queue in order with each client's wait, and the
/// two subscribers, each of its own channel of the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_lock_is_reported_as_it_is() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (a, b, c) = (
        support::client(&server.url()).await,
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    );
    let g = a.lock("orders:42").await.unwrap();
    let wb = support::spawn_waiter(&b, "orders:42");
    support::until_queued(&admin, &b, "orders:42").await;
    let b_since = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let wc = support::spawn_waiter(&c, "orders:42");
    support::until_queued(&admin, &c, "orders:42").await;
    let c_since = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let before = Instant::now();
    let doc = status_json(&server.url(), &["orders:42"]).await;
    let s = state(&doc, "orders:42", "mutex");
    let holder = &s["holders"][0];
    assert_eq!(holder["token"], g.token());
    assert_eq!(holder["fencing_token"], g.fencing_token());
    let left = holder["remaining_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= g.lease().as_millis() as u64, "{left}");
    let queue = s["queue"].as_array().unwrap();
    assert_eq!(queue.len(), 2, "{s}");
    assert_eq!(queue[0]["client"], b.client_id());
    assert_eq!(queue[1]["client"], c.client_id());
    // Waits by the server clock, checked against this test's own clock
    // (the first waited 300 ms longer; a little slack for the round trips).
    let waited = |i: usize| queue[i]["waiting_ms"].as_u64().expect("a recorded wait");
    let after = before.elapsed().as_millis() as u64;
    let b_ms = b_since.elapsed().as_millis() as u64;
    let c_ms = c_since.elapsed().as_millis() as u64;
    assert!(
        waited(0) + 100 >= b_ms - after && waited(0) <= b_ms + 100,
        "{} vs {b_ms}",
        waited(0)
    );
    assert!(
        waited(1) + 100 >= c_ms - after && waited(1) <= c_ms + 100,
        "{} vs {c_ms}",
        waited(1)
    );
    assert!(waited(0) >= waited(1) + 200, "{queue:?}");
    // One channel per waiting client (protocol 3), one subscriber each: two.
    let subscribers = s["subscribers"].as_array().unwrap();
    let name = a.redis_key("orders:42");
    let channels: Vec<(String, u64)> = subscribers
        .iter()
        .map(|c| {
            (
                c["channel"].as_str().unwrap().to_owned(),
                c["subscribers"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        channels,
        vec![
            (format!("{name}:ch:{}", b.client_id()), 1),
            (format!("{name}:ch:{}", c.client_id()), 1)
        ],
        "{s}"
    );

    let (code, text, _) = status(&server.url(), &["orders:42"]).await;
    assert_eq!(code, 0);
    println!("{text}");
    assert!(
        text.contains(&format!("fencing token {}", g.fencing_token())),
        "{text}"
    );
    // Each client by its name (default `<host>:<pid>`) and id.
    assert!(
        text.contains(&format!("1. client {} ({}, up ", b.name(), b.client_id())),
        "{text}"
    );
    assert!(
        text.contains(&format!("held by {} ({}, up ", a.name(), a.client_id())),
        "{text}"
    );

    let first = g.fencing_token();
    g.release().await.unwrap();
    wb.await.unwrap();
    wc.await.unwrap();
    let doc = status_json(&server.url(), &["orders:42"]).await;
    let s = state(&doc, "orders:42", "mutex");
    assert_eq!(s["held"], false, "{s}");
    assert!(s["queue"].as_array().unwrap().is_empty(), "{s}");
    assert!(s["last_fence"].as_u64().unwrap() > first);
}

/// A semaphore's holds with their permits and a queued 2-permit caller; a
/// read-write lock's write with readers and a writer queued behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_read_write_locks() {
    let server = RedisServer::start();
    let (a, b) = (
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    );
    let sem = a.semaphore("payments", 3).unwrap();
    let p1 = sem.acquire().await.unwrap();
    let p2 = sem
        .acquire_with(SemaphoreOptions::default().permits(2))
        .await
        .unwrap();
    let waiting = {
        let sem = b.semaphore("payments", 3).unwrap();
        tokio::spawn(async move {
            sem.acquire_with(SemaphoreOptions::default().permits(2))
                .await
        })
    };
    let w = a.rw_lock("cache").write().await.unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let rw = b.rw_lock("cache");
            tokio::spawn(async move { rw.read().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let writer = {
        let rw = a.rw_lock("cache");
        tokio::spawn(async move { rw.write().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let doc = status_json(&server.url(), &["payments", "cache"]).await;
    let s = state(&doc, "payments", "semaphore");
    let holders = s["holders"].as_array().unwrap();
    let permits = |token: &str| {
        holders
            .iter()
            .find(|h| h["token"] == token)
            .map(|h| h["permits"].as_u64().unwrap())
    };
    assert_eq!(permits(p1.token()), Some(1), "{s}");
    assert_eq!(permits(p2.token()), Some(2), "{s}");
    assert_eq!(s["used"], 3);
    assert_eq!(s["queue"][0]["client"], b.client_id());
    assert_eq!(s["queue"][0]["permits"], 2);
    assert_eq!(s["queue"][0]["limit"], 3);
    assert!(s["queue"][0]["waiting_ms"].as_u64().unwrap() >= 400, "{s}");

    let s = state(&doc, "cache", "rwlock");
    assert_eq!(s["holders"][0]["token"], w.token());
    assert_eq!(s["holders"][0]["writer"], true);
    let queue = s["queue"].as_array().unwrap();
    assert_eq!(queue.len(), 2, "{s}");
    assert_eq!(queue[0]["client"], b.client_id());
    assert_eq!(queue[0]["writer"], false);
    assert_eq!(
        queue[0]["permits"], 3,
        "the readers' entry asks for all three"
    );
    assert_eq!(queue[1]["client"], a.client_id());
    assert_eq!(queue[1]["writer"], true);
    let channels: Vec<u64> = s["subscribers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["subscribers"].as_u64().unwrap())
        .collect();
    assert_eq!(channels, [1, 1], "readers' and writers' channels: {s}");

    let (_, text, _) = status(&server.url(), &["payments", "cache"]).await;
    println!("{text}");

    drop((p1, p2, w));
    waiting.await.unwrap().unwrap().release().await.unwrap();
    for r in readers {
        r.await.unwrap().unwrap().release().await.unwrap();
    }
    writer.await.unwrap().unwrap().release().await.unwrap();
}

/// With no key, status scans the prefix: every name, once, whatever its
/// primitive; `--limit` bounds it and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_scans_the_prefix() {
    let server = RedisServer::start();
    let a = support::client(&server.url()).await;
    let _m = a.lock("m").await.unwrap();
    let _s = a.semaphore("s", 2).unwrap().acquire().await.unwrap();
    let _r = a.rw_lock("r").read().await.unwrap();
    // Another prefix's lock and an unrelated key are not shown.
    let other = LockClient::builder()
        .url(server.url())
        .prefix("other")
        .build()
        .await
        .unwrap();
    let _o = other.lock("o").await.unwrap();
    let admin = server.admin().await;
    let _: () = admin
        .set("relaylock-unrelated", "x", None, None, false)
        .await
        .unwrap();

    let doc = status_json(&server.url(), &[]).await;
    let keys: Vec<&str> = doc["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["m", "r", "s"]);
    assert_eq!(doc["truncated"], false);
    let doc = status_json(&server.url(), &["--limit", "2"]).await;
    assert_eq!(doc["keys"].as_array().unwrap().len(), 2);
    assert_eq!(doc["truncated"], true);
    let doc = status_json(&server.url(), &["--prefix", "other"]).await;
    assert_eq!(doc["keys"][0]["key"], "o");
}

/// In a cluster, the scan covers every primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scan_is_cluster_wide() {
    let cluster = RedisCluster::start(3, 0);
    let client = support::client(&cluster.url()).await;
    let names: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(client.lock(n).await.unwrap());
    }
    let doc = status_json(&cluster.url(), &[]).await;
    let mut keys: Vec<String> = doc["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    let mut want = names.clone();
    want.sort();
    assert_eq!(keys, want);
    for g in &guards {
        let s = state(&doc, g.key(), "mutex");
        assert_eq!(s["holders"][0]["token"], g.token());
    }
}

/// The read-only ACL user docs/security.md documents is enough; a user that lacks a
/// command gets exit status 77 and a message that says what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_acl_is_enough_and_missing_permission_is_clear() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let a = support::client(&server.url()).await;
    let _g = a.lock("k").await.unwrap();
    let _s = a.semaphore("s", 1).unwrap().acquire().await.unwrap();
    let setuser = |name: &'static str, rules: &'static [&'static str]| {
        let admin = admin.clone();
        async move {
            let mut args = vec!["SETUSER", name, "on", ">pw"];
            args.extend_from_slice(rules);
            let _: () = admin
                .custom(CustomCommand::new_static("ACL", None, false), args)
                .await
                .unwrap();
        }
    };
    setuser("status", README_STATUS_ACL).await;
    let url = format!("redis://status:pw@127.0.0.1:{}", server.port);
    let doc = status_json(&url, &[]).await;
    assert_eq!(doc["keys"].as_array().unwrap().len(), 2, "{doc}");
    assert_eq!(state(&doc, "k", "mutex")["held"], true);
    // The same user cannot take a lock (it cannot even load the scripts).
    let denied = match LockClient::connect(&url).await {
        Ok(client) => client.try_lock("x").await.is_err(),
        Err(_) => true,
    };
    assert!(denied, "a read-only user took a lock");

    let without_hgetall: Vec<&'static str> = README_STATUS_ACL
        .iter()
        .copied()
        .filter(|r| *r != "+hgetall")
        .collect();
    setuser("partial", without_hgetall.leak()).await;
    let url = format!("redis://partial:pw@127.0.0.1:{}", server.port);
    let (code, _, err) = status(&url, &["k"]).await;
    assert_eq!(code, 77, "{err}");
    assert!(
        err.contains("permission denied") && err.contains("hgetall"),
        "{err}"
    );
}

/// `--watch` refreshes once a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_refreshes() {
    let server = RedisServer::start();
    let a = support::client(&server.url()).await;
    let _g = a.lock("w").await.unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_relaylock"))
        .args(["status", "--url", &server.url(), "--watch", "--json", "w"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    child.start_kill().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let refreshes = text.lines().filter(|l| l.starts_with('{')).count();
    assert!(
        (2..=4).contains(&refreshes),
        "{refreshes} refreshes in 2.5 s:\n{text}"
    );
}

/// The ACL above is docs/security.md's, rule for rule.
#[test]
fn the_acl_is_the_one_docs_security_documents() {
    let readme = include_str!("../../docs/security.md");
    let block = readme
        .split("ACL SETUSER ops on >secret ")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/security.md documents the read-only user");
    let documented: Vec<&str> = block.split_whitespace().collect();
    assert_eq!(documented, README_STATUS_ACL);
}

/// docs/security.md's read-only ACL user for `relaylock status` (prefix `relaylock`).
const README_STATUS_ACL: &[&str] = &[
    "resetkeys",
    "%R~relaylock:*",
    "resetchannels",
    "-@all",
    "+get",
    "+pttl",
    "+zrange",
    "+hget",
    "+hgetall",
    "+time",
    "+pubsub|numsub",
    "+pubsub|shardnumsub",
    "+scan",
    "+ping",
    "+info",
    "+client|id",
    "+cluster|slots",
];

/// Issue 35: a server that may evict relaylock's keys is warned about
/// above the table (and in `--json`), as the library's `build()` does; a
/// server that never evicts is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_server_is_warned_about_above_the_table() {
    let server =
        RedisServer::try_start(&["--maxmemory", "3mb", "--maxmemory-policy", "volatile-lru"])
            .unwrap_or_else(|e| panic!("{e}"));
    let a = support::client(&server.url()).await;
    let _g = a.lock("evicted").await.unwrap();
    let (code, out, err) = status(&server.url(), &["evicted"]).await;
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("warning: ")
            && first.contains(&format!("127.0.0.1:{}", server.port))
            && first.contains("volatile-lru")
            && first.contains("noeviction"),
        "{out}"
    );
    assert!(out.contains("evicted"), "the table follows: {out}");
    let doc = status_json(&server.url(), &["evicted"]).await;
    assert_eq!(doc["servers"][0]["maxmemory_policy"], "volatile-lru");
    assert_eq!(doc["servers"][0]["may_evict"], true);

    let safe = RedisServer::try_start(&["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"])
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, out, _) = status(&safe.url(), &[]).await;
    assert_eq!(code, 0);
    assert!(!out.contains("warning"), "{out}");
    let doc = status_json(&safe.url(), &[]).await;
    assert_eq!(doc["servers"][0]["may_evict"], false);
}

/// Issue 36: `--held` looks at every name, not the first 100 of the scan.
/// With 1,000 free names (tombstones) and 5 held locks, it lists exactly
/// the 5 (before: 2 of them, then "(the first 100 names of the SCAN ...)",
/// or "nothing held"); without `--held`, `--limit` bounds what is listed
/// and says how many more there are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_looks_at_every_name() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let pipeline = admin.pipeline();
    for i in 0..1000 {
        let _: () = pipeline
            .set(
                format!("relaylock:4:{{free{i:04}}}"),
                format!("-{}||", 1_000_000 + i),
                Some(Expiration::PX(120_000)),
                None,
                false,
            )
            .await
            .unwrap();
    }
    let _: Vec<Value> = pipeline.all().await.unwrap();
    let a = support::client(&server.url()).await;
    let mut guards = Vec::new();
    for i in [3, 250, 501, 777, 999] {
        guards.push(a.lock(&format!("held{i:04}")).await.unwrap());
    }
    let doc = status_json(&server.url(), &["--held"]).await;
    let mut keys: Vec<&str> = doc["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        ["held0003", "held0250", "held0501", "held0777", "held0999"]
    );
    assert_eq!(doc["names"], 1005);
    assert_eq!(doc["truncated"], false);
    let (code, out, _) = status(&server.url(), &["--held"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("held0")).count(),
        5,
        "{out}"
    );
    assert!(!out.contains("more"), "{out}");

    // Without --held: 100 listed, the rest counted.
    let (_, out, _) = status(&server.url(), &[]).await;
    assert!(
        out.contains("(905 more names not listed, of 1005; --limit 1005 lists them)"),
        "{}",
        out.lines().last().unwrap_or_default()
    );
    // Nothing held: said only once every name was looked at.
    drop(guards);
    a.shutdown().await.unwrap();
    let (_, out, _) = status(&server.url(), &["--held"]).await;
    assert_eq!(
        out.trim(),
        "nothing held under relaylock: (all 1005 names looked at)"
    );
    let (_, out, _) = status(&server.url(), &["--held", "held0003"]).await;
    assert_eq!(out.trim(), "nothing held: held0003");
}

/// A multi-key hold: each of its keys is listed as a held lock, with the
/// other keys it was taken together with (one token), in text and JSON; a
/// single-key hold beside it names none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_key_hold_shows_the_keys_taken_together() {
    let server = RedisServer::start();
    let a = support::client(&server.url()).await;
    let set = a.lock_all(["seat:2", "seat:1", "seat:3"]).await.unwrap();
    let single = a.lock("other").await.unwrap();
    let doc = status_json(&server.url(), &["--held"]).await;
    let with = |key: &str| -> Vec<String> {
        let holder = &state(&doc, key, "mutex")["holders"][0];
        assert_eq!(holder["token"], set.token().to_string().as_str());
        let mut v: Vec<String> = holder["taken_with"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(with("seat:1"), ["seat:2", "seat:3"]);
    assert_eq!(with("seat:3"), ["seat:1", "seat:2"]);
    let other = &state(&doc, "other", "mutex")["holders"][0];
    assert_eq!(other["taken_with"].as_array().unwrap().len(), 0);
    let (code, out, _) = status(&server.url(), &["--held"]).await;
    assert_eq!(code, 0);
    assert_eq!(out.matches("taken together with:").count(), 3, "{out}");
    set.release().await.unwrap();
    single.release().await.unwrap();
}

/// An election: its lock `election:<name>` is listed with its leader's
/// proclaimed value, term (the fencing token) and the queued candidates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_shows_its_leader_and_candidates() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (a, b) = (
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    );
    let leader = a.election("jobs").campaign("pod-7").await.unwrap();
    let candidate = {
        let b = b.clone();
        tokio::spawn(async move { b.election("jobs").campaign("pod-8").await.unwrap() })
    };
    support::until_queued(&admin, &b, "election:jobs").await;
    let doc = status_json(&server.url(), &["election:jobs"]).await;
    let s = state(&doc, "election:jobs", "mutex");
    assert_eq!(s["holders"][0]["leader_value"], "pod-7");
    assert_eq!(s["holders"][0]["fencing_token"], leader.fencing_token());
    assert_eq!(s["queue"].as_array().unwrap().len(), 1);
    let (_, out, _) = status(&server.url(), &["election:jobs"]).await;
    assert!(
        out.contains("leads the election, proclaiming: pod-7"),
        "{out}"
    );
    leader.resign().await.unwrap();
    candidate.await.unwrap().resign().await.unwrap();
}

/// Issue 36, the CLI's edges: `--url` before the subcommand works as after
/// it; a bad key is a usage error (exit 2, like `--lease 0`), not "Redis
/// unreachable" (69); `--watch` into a pipe writes no clear-screen escapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_edges() {
    let server = RedisServer::start();
    let a = support::client(&server.url()).await;
    let g = a.lock("edge").await.unwrap();
    let (code, before, err) = common::relaylock(&["--url", &server.url(), "status", "edge"]).await;
    assert_eq!(code, 0, "{err}");
    let (_, after, _) = status(&server.url(), &["edge"]).await;
    let token = format!("token {}", g.token());
    assert!(
        before.contains(&token) && after.contains(&token),
        "{before}\n{after}"
    );

    for args in [
        vec!["run", "", "--", "true"],
        vec!["unlock", "", "--token", "t"],
        vec!["status", ""],
    ] {
        let mut all = vec!["--url", "redis://127.0.0.1:1"];
        all.extend(args.iter().copied());
        let (code, _, err) = common::relaylock(&all).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("the key is empty"), "{err}");
    }

    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_relaylock"))
        .args(["status", "--watch", "--url", &server.url(), "edge"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    watch.start_kill().unwrap();
    let out = watch.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.matches("edge (mutex").count() >= 1, "{text}");
    assert!(!text.contains('\x1b'), "escapes into a pipe: {text:?}");
}
