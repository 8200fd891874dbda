//! relaylock's WARN (and ERROR) log events, recorded with the time they were
//! logged, for tests that explain or excuse what they saw with what the
//! library said. [`install`] once per test process (it sets the global
//! `tracing` subscriber); [`recorded`] returns every event so far.

use std::fmt::Write as _;
use std::sync::{Mutex, Once};
use std::time::Instant;

/// One WARN or ERROR event.
#[derive(Clone, Debug)]
pub struct Warning {
    /// When it was logged.
    pub at: Instant,
    /// Its message.
    pub message: String,
    /// Its `key` field (the lock's Redis name), if any.
    pub key: String,
    /// Its `error` field, if any.
    pub error: String,
    /// Every other field, as `name=value` pairs.
    pub fields: String,
}

static RECORDED: Mutex<Vec<Warning>> = Mutex::new(Vec::new());

/// Start recording (the first call in a process; later calls do nothing).
/// Panics if another global subscriber was set.
pub fn install() {
    use tracing_subscriber::layer::SubscriberExt;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(Recorder);
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
    });
}

/// Every event recorded so far, in order.
pub fn recorded() -> Vec<Warning> {
    RECORDED.lock().unwrap().clone()
}

struct Recorder;

struct Fields(Warning);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.0.message = format!("{value:?}"),
            "key" => self.0.key = format!("{value:?}"),
            "error" => self.0.error = format!("{value:?}"),
            name => {
                let _ = write!(self.0.fields, "{name}={value:?} ");
            }
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn register_callsite(
        &self,
        metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if *metadata.level() <= tracing::Level::WARN {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(
        &self,
        metadata: &tracing::Metadata<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields(Warning {
            at: Instant::now(),
            message: String::new(),
            key: String::new(),
            error: String::new(),
            fields: String::new(),
        });
        event.record(&mut fields);
        RECORDED.lock().unwrap().push(fields.0);
    }
}
