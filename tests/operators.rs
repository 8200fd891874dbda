//! What the people who run relaylock see: who holds a lock and
//! who waits, by name and since when, also after the holder's process is
//! gone; and a warning when a client goes away with holds it never
//! released.

use relaylock_testkit as support;

use std::time::{Duration, SystemTime};

use relaylock::inspect::client_of_token;
use relaylock::LockOptions;
use support::{warnings, RedisServer};

/// Every hold and queue entry names its client: the token starts with the
/// client's id, and the client's record (one `SET` at `build`) gives its
/// name and start. The holder's hold shows since when it is held.
#[tokio::test]
async fn a_hold_and_a_queued_client_are_named() {
    let server = RedisServer::start();
    let holder = support::preset(&server.url())
        .name("billing-worker-7")
        .build()
        .await
        .unwrap();
    let waiter = support::preset(&server.url()).build().await.unwrap();
    assert_eq!(holder.name(), "billing-worker-7");
    assert!(
        waiter.name().ends_with(&format!(":{}", std::process::id())),
        "the default is <host>:<pid>: {}",
        waiter.name()
    );
    let guard = holder.lock("orders:42").await.unwrap();
    assert_eq!(client_of_token(guard.token()), Some(holder.client_id()));
    let queued = support::spawn_waiter(&waiter, "orders:42");
    let found = support::eventually(Duration::from_secs(3), || async {
        let i = holder.inspect("orders:42").await.unwrap();
        !i.states[0].queue.is_empty()
    })
    .await;
    assert!(found, "the waiter never queued");
    tokio::time::sleep(Duration::from_millis(30)).await;
    let i = waiter.inspect("orders:42").await.unwrap();
    let state = &i.states[0];
    let h = &state.holders[0];
    let who = h.who.as_ref().expect("the holder is named");
    assert_eq!(who.id, holder.client_id());
    assert_eq!(who.name.as_deref(), Some("billing-worker-7"));
    let up = SystemTime::now()
        .duration_since(who.started.unwrap())
        .unwrap();
    assert!(up < Duration::from_secs(30), "started {up:?} ago");
    let held = SystemTime::now().duration_since(h.since.unwrap()).unwrap();
    assert!(
        held >= Duration::from_millis(20) && held < Duration::from_secs(30),
        "held for {held:?}"
    );
    let q = &state.queue[0];
    assert_eq!(q.client, waiter.client_id());
    assert_eq!(q.who.as_ref().unwrap().name.as_deref(), Some(waiter.name()));
    guard.release().await.unwrap();
    queued.await.unwrap();
}

/// A holder that is gone without releasing (its process killed, here its
/// guard forgotten and its client dropped) is still named while its hold
/// lasts: its record outlives it by a day, longer than any lease.
#[tokio::test]
async fn a_dead_holder_is_still_named() {
    let server = RedisServer::start();
    let gone = support::preset(&server.url())
        .name("nightly-compaction@batch-3")
        .build()
        .await
        .unwrap();
    let guard = gone
        .lock_with(
            "compact",
            LockOptions::default().lease(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    std::mem::forget(guard);
    drop(gone);
    let operator = support::preset(&server.url()).build().await.unwrap();
    let i = operator.inspect("compact").await.unwrap();
    let h = &i.states[0].holders[0];
    assert_eq!(
        h.who.as_ref().and_then(|w| w.name.as_deref()),
        Some("nightly-compaction@batch-3")
    );
    assert!(h.remaining > Duration::from_secs(50));
}

/// A guard dropped right before the runtime ends (a `main` that returns
/// without `shutdown()`): its background release never runs, and the
/// client says so at WARN, naming the key it leaves held until its lease
/// ends.
#[test]
fn a_runtime_that_ends_before_a_release_warns() {
    warnings::install();
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = runtime.block_on(async {
        let client = support::preset(&server.url())
            .name("forgetful")
            .build()
            .await
            .unwrap();
        let guard = client.lock("forgotten").await.unwrap();
        drop(guard);
        client.redis_key("forgotten")
    });
    drop(runtime);
    let said: Vec<_> = warnings::recorded()
        .into_iter()
        .filter(|w| w.key.contains(&key) && w.message.contains("shutdown()"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", warnings::recorded());
    // And it is so: the key is still held.
    let check = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let held = check.block_on(async {
        let c = support::preset(&server.url()).build().await.unwrap();
        c.is_locked("forgotten").await.unwrap()
    });
    assert!(held);
}

/// What spans were made: name, parent's name, and every field recorded.
#[derive(Default, Clone)]
struct Spans(std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let span = ctx.span(id).unwrap();
        let parent = span
            .parent()
            .map(|p| p.name().to_owned())
            .unwrap_or_default();
        let mut fields = String::new();
        attrs.record(&mut Fields(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push((span.name().to_owned(), parent, fields));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let name = ctx.span(id).unwrap().name().to_owned();
        let mut spans = self.0.lock().unwrap();
        if let Some(s) = spans.iter_mut().rev().find(|s| s.0 == name) {
            values.record(&mut Fields(&mut s.2));
        }
    }
}

/// A lock call and the hold it makes are spans that the caller's span
/// (a request's) parents, with the key, the metrics name, the fence and
/// the outcome.
#[test]
fn lock_calls_and_holds_are_spans_of_the_callers_span() {
    use tracing_subscriber::layer::SubscriberExt;
    let server = RedisServer::start();
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fence = tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let client = support::preset(&server.url()).build().await.unwrap();
            let request = tracing::info_span!("request");
            let fence = tracing::Instrument::instrument(
                async {
                    let g = client
                        .lock_with("orders:42", LockOptions::default().name("orders"))
                        .await
                        .unwrap();
                    let fence = g.fencing_token();
                    g.release().await.unwrap();
                    let busy = client.lock("orders:43").await.unwrap();
                    let r = client
                        .lock_with(
                            "orders:43",
                            LockOptions::default().wait(Duration::from_millis(50)),
                        )
                        .await;
                    assert!(r.is_err());
                    busy.release().await.unwrap();
                    fence
                },
                request,
            )
            .await;
            client.shutdown().await.unwrap();
            fence
        })
    });
    let spans = spans.0.lock().unwrap().clone();
    let find = |name: &str, has: &str| {
        spans
            .iter()
            .find(|s| s.0 == name && s.2.contains(has))
            .unwrap_or_else(|| panic!("no {name} with {has}: {spans:?}"))
            .clone()
    };
    let lock = find("relaylock.lock", "key=\"orders:42\"");
    assert_eq!(lock.1, "request");
    assert!(lock.2.contains("name=\"orders\""), "{lock:?}");
    assert!(lock.2.contains(&format!("fence={fence}")), "{lock:?}");
    assert!(lock.2.contains("outcome=\"acquired\""), "{lock:?}");
    let hold = find("relaylock.hold", "key=\"orders:42\"");
    assert_eq!(hold.1, "request");
    assert!(hold.2.contains(&format!("fence={fence}")), "{hold:?}");
    assert!(hold.2.contains("outcome=\"released\""), "{hold:?}");
    let timed_out = find("relaylock.lock", "outcome=\"timeout\"");
    assert!(timed_out.2.contains("key=\"orders:43\""), "{timed_out:?}");
}
