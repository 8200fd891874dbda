//! A web backend as users build it: an axum service whose concurrent requests
//! update the same order under a relaylock lock, with fenced writes and a
//! Prometheus `/metrics` page.
//!
//! The orders live in Redis too, as one plain hash per order
//! (`shop:order:<id>`, apart from the lock's own names). Adding an item is a
//! read-modify-write: read the order, change it, spend a little time (the
//! "work" a real handler does: pricing, stock checks...), write it back. Two
//! requests doing that at once would lose an update, so the handler runs it
//! under [`LockClient::with_lock`] on `order:<id>`. And because no lock can
//! stop a holder that pauses past its lease, the write is *fenced*: the store
//! keeps the highest fencing token it accepted for the order and rejects a
//! write with a lower one (a tiny Lua script, so the check and the write are
//! one atomic step).
//!
//! | route | what |
//! |-------|------|
//! | `POST /orders/{id}/items` | add one item to order `id` under the lock: 200 with the new order |
//! | `GET /orders/{id}` | read the order (no lock: the hash is always a whole write): 200, or 404 |
//! | `GET /metrics` | the Prometheus text page, with `relaylock_acquire_wait_seconds` as a histogram |
//!
//! Statuses: 400 for an order id that is not a number; 503 with
//! `Retry-After` when the lock was not free within the wait bound; 409 when
//! the store rejected the write as stale (a later holder wrote first: nothing
//! was applied); 500 with a message for a Redis error, or when the lock was
//! lost during the update (then it may or may not have been applied).
//! Bodies are JSON: `{"id":42,"items":3,"fence":1750000000000123}` or
//! `{"error":"..."}`.
//!
//! Run it (it prints where it listens), against a Redis of your own:
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 LISTEN_ADDR=127.0.0.1:3000 cargo run --example web_backend
//! ```
//!
//! Settings, all optional: `REDIS_URL` (default `redis://127.0.0.1:6379`),
//! `LISTEN_ADDR` (default `127.0.0.1:3000`; port 0 picks a free one),
//! `LOCK_WAIT_MS` (how long a request waits for the lock, default 2000) and
//! `WORK_MS` (the simulated work inside the lock, default 5).
//!
//! Then try it:
//!
//! ```text
//! curl -X POST http://127.0.0.1:3000/orders/42/items
//! seq 50 | xargs -P 50 -I{} curl -s -o /dev/null -w '%{http_code}\n' -X POST http://127.0.0.1:3000/orders/42/items | sort | uniq -c
//! curl http://127.0.0.1:3000/orders/42          # "items":51: no update lost
//! curl -s http://127.0.0.1:3000/metrics | grep relaylock_acquire_wait_seconds
//! ```
//!
//! Run two instances (two `LISTEN_ADDR`s) on one Redis and the lock still
//! serialises the updates: `tests/web_backend.rs` does that with two
//! processes and 300 concurrent requests.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use fred::prelude::*;
use fred::types::config::ReconnectPolicy;
use fred::types::scripts::Script;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use relaylock::{LockClient, LockOptions};
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The fenced write: set the order's `items` only if `fence` is higher than
/// the last fence the order accepted. Replies 1 when written, 0 when stale.
/// (Fencing tokens are about 1.8e15: exact in Lua's doubles, which hold
/// integers up to 2^53.)
const FENCED_WRITE: &str = r#"
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'items', ARGV[2])
return 1
"#;

/// One order, as the store holds it and the API returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Order {
    /// The order id.
    pub id: u64,
    /// Items in the order.
    pub items: u64,
    /// The fencing token of the last write the store accepted.
    pub fence: u64,
}

impl Order {
    fn json(&self) -> String {
        serde_json::json!({"id": self.id, "items": self.items, "fence": self.fence}).to_string()
    }
}

/// Why an update did not happen.
#[derive(Debug)]
pub enum StoreError {
    /// The store has already accepted a write with fence `last` >= ours.
    Stale {
        /// Our fence.
        fence: u64,
        /// The highest fence the order accepted.
        last: u64,
    },
    /// Redis failed (connection, timeout, error reply).
    Redis(fred::error::Error),
}

impl From<fred::error::Error> for StoreError {
    fn from(e: fred::error::Error) -> Self {
        StoreError::Redis(e)
    }
}

/// The orders, one hash per order in Redis, on their own connection (the
/// lock client has its own). Fenced writes only.
#[derive(Clone)]
pub struct OrderStore {
    redis: Client,
    write: Script,
}

fn order_key(id: u64) -> String {
    format!("shop:order:{id}")
}

fn number(field: Option<String>, what: &str) -> Result<u64, fred::error::Error> {
    field.map_or(Ok(0), |v| {
        v.parse().map_err(|_| {
            fred::error::Error::new(
                fred::error::ErrorKind::Parse,
                format!("order field {what} is not a number: {v:?}"),
            )
        })
    })
}

impl OrderStore {
    /// Connect to the Redis at `url`, with bounded commands and reconnects.
    pub async fn connect(url: &str) -> Result<Self, fred::error::Error> {
        let mut builder = Builder::from_config(Config::from_url(url)?);
        builder
            .with_connection_config(|c| c.connection_timeout = Duration::from_secs(5))
            .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2));
        let redis = builder.build()?;
        match tokio::time::timeout(Duration::from_secs(5), redis.init()).await {
            Ok(connected) => drop(connected?),
            Err(_) => {
                let _ = redis.quit().await;
                return Err(fred::error::Error::new(
                    fred::error::ErrorKind::Timeout,
                    format!("could not connect to {url} within 5 s"),
                ));
            }
        }
        Ok(OrderStore {
            redis,
            write: Script::from_lua(FENCED_WRITE),
        })
    }

    /// The order `id`, or `None` when it has never been written.
    pub async fn get(&self, id: u64) -> Result<Option<Order>, fred::error::Error> {
        let (items, fence): (Option<String>, Option<String>) = self
            .redis
            .hmget(order_key(id), vec!["items", "fence"])
            .await?;
        if items.is_none() && fence.is_none() {
            return Ok(None);
        }
        Ok(Some(Order {
            id,
            items: number(items, "items")?,
            fence: number(fence, "fence")?,
        }))
    }

    /// Add one item to order `id` as a read-modify-write taking `work`, then
    /// write it back fenced by `fence`. Call it holding the order's lock:
    /// the lock keeps concurrent updates from losing each other's items, the
    /// fence keeps a holder that outlived its lease from overwriting a newer
    /// one.
    pub async fn add_item(&self, id: u64, fence: u64, work: Duration) -> Result<Order, StoreError> {
        let mut order = self.get(id).await?.unwrap_or(Order {
            id,
            items: 0,
            fence: 0,
        });
        tokio::time::sleep(work).await;
        order.items += 1;
        let key = order_key(id);
        let written: i64 = self
            .write
            .evalsha_with_reload(
                &self.redis,
                vec![key],
                vec![fence.to_string(), order.items.to_string()],
            )
            .await?;
        if written != 1 {
            let last = self.get(id).await?.map_or(0, |o| o.fence);
            return Err(StoreError::Stale { fence, last });
        }
        order.fence = fence;
        Ok(order)
    }
}

/// What a handler needs. Cheap to clone: every field is a handle.
#[derive(Clone)]
pub struct AppState {
    /// The lock client.
    pub locks: LockClient,
    /// The orders.
    pub store: OrderStore,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// How long a request waits for an order's lock before answering 503.
    pub lock_wait: Duration,
    /// The simulated work inside the lock.
    pub work: Duration,
}

/// Install the process-wide Prometheus recorder, with histogram buckets (not
/// the default summaries) for relaylock's wait and hold times, and start
/// its upkeep task. Call once per process, inside a Tokio runtime.
pub fn install_metrics() -> Result<PrometheusHandle, BuildError> {
    const BUCKETS: &[f64] = &[
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(relaylock::metrics::ACQUIRE_WAIT_SECONDS.into()),
            BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(relaylock::metrics::HELD_SECONDS.into()),
            BUCKETS,
        )?
        .install_recorder()?;
    // Without the exporter's own HTTP listener nobody runs the upkeep that
    // keeps the recorder's memory bounded: do it here.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// The routes.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/orders/{id}/items", post(add_item))
        .route("/orders/{id}", get(get_order))
        .route("/metrics", get(render_metrics))
        .with_state(state)
}

/// Serve [`app`] on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// An error answer: a status and a message, as JSON.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.message}).to_string();
        let json = [(header::CONTENT_TYPE, "application/json")];
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            (self.status, [(header::RETRY_AFTER, "1")], json, body).into_response()
        } else {
            (self.status, json, body).into_response()
        }
    }
}

fn ok(order: Order) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        order.json(),
    )
        .into_response()
}

fn order_id(raw: &str) -> Result<u64, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("order id must be a non-negative integer, got {raw:?}"),
        )
    })
}

async fn add_item(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = order_id(&id)?;
    let options = LockOptions::default().wait(state.lock_wait).name("orders");
    let (store, work) = (&state.store, state.work);
    let updated = state
        .locks
        .with_lock(&format!("order:{id}"), options, async |guard| {
            store.add_item(id, guard.fencing_token(), work).await
        })
        .await;
    match updated {
        Ok(Ok(order)) => Ok(ok(order)),
        Ok(Err(StoreError::Stale { fence, last })) => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("stale write rejected (fence {fence}, order already at {last}); not applied"),
        )),
        Ok(Err(StoreError::Redis(e))) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("order store: {e}"),
        )),
        Err(relaylock::Error::Timeout { .. }) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "order {id} is busy: lock not free within {:?}",
                state.lock_wait
            ),
        )),
        Err(relaylock::Error::LockLost { .. }) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "lock lost during the update: it may or may not have been applied; re-read the order",
        )),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("lock: {e}"),
        )),
    }
}

async fn get_order(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = order_id(&id)?;
    match state.store.get(id).await {
        Ok(Some(order)) => Ok(ok(order)),
        Ok(None) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no order {id}"),
        )),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("order store: {e}"),
        )),
    }
}

async fn render_metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// A setting from the environment, or its default.
fn setting<T: std::str::FromStr>(name: &str, default: T) -> Result<T, BoxError> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("{name}={v:?} is not a valid value").into()),
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(e) => Err(format!("{name}: {e}").into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let redis_url: String = setting("REDIS_URL", "redis://127.0.0.1:6379".to_string())?;
    let listen: SocketAddr = setting("LISTEN_ADDR", SocketAddr::from(([127, 0, 0, 1], 3000)))?;
    let lock_wait = Duration::from_millis(setting("LOCK_WAIT_MS", 2000)?);
    let work = Duration::from_millis(setting("WORK_MS", 5)?);

    let metrics = install_metrics()?;
    // Each Redis command of the lock client gives up after 1 s (the default
    // is 5 s), so a request fails promptly when Redis is down instead of
    // outlasting its lock wait.
    let locks = LockClient::builder()
        .url(&redis_url)
        .command_timeout(Duration::from_secs(1))
        .build()
        .await?;
    let store = OrderStore::connect(&redis_url).await?;
    let listener = TcpListener::bind(listen).await?;
    // Never print a password from the URL.
    let redis_shown = match redis_url.rsplit_once('@') {
        Some((_, host)) => format!("redis://...@{host}"),
        None => redis_url.clone(),
    };
    println!(
        "listening on http://{} (Redis {redis_shown}, lock wait {lock_wait:?}, work {work:?})",
        listener.local_addr()?,
    );
    let state = AppState {
        locks: locks.clone(),
        store,
        metrics,
        lock_wait,
        work,
    };
    // Graceful shutdown: on Ctrl-C (or SIGTERM from an orchestrator) axum
    // stops accepting and lets the requests in progress finish; then the
    // lock client releases whatever this instance still holds (a guard a
    // handler dropped releases in the background, and the process is about
    // to exit) and leaves every queue, so that no key of this instance
    // stays held for its lease during a rolling deploy.
    serve(listener, state, stop_requested()).await?;
    locks.shutdown().await?;
    Ok(())
}

/// Completes on Ctrl-C, or on SIGTERM on Unix.
async fn stop_requested() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
