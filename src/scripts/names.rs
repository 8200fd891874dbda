//! The Redis names of one lock, semaphore or read-write lock: its value,
//! its channels and the names beside them ([`Names`]), and which primitive
//! they belong to ([`Kind`]). Every name starts with `<prefix>:4:{<key>}`,
//! so all of a primitive's names hash to one Redis Cluster slot and its
//! scripts stay valid there.

use fred::bytes_utils::Str;

use super::{PROTOCOL, QUEUE_TIMES};

/// Which primitive a set of names belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A lock: its value is `<prefix>:4:{<key>}`.
    Mutex,
    /// A counting semaphore: its value is `<prefix>:4:{<key>}:sem`, with
    /// the holds' expiry index `...:sem:h` and facts `...:sem:t`.
    Semaphore,
    /// A read-write lock's readers: the value `<prefix>:4:{<key>}:rw` (a
    /// semaphore's state, see [`RW_WRITE`](super::RW_WRITE)), channel `...:rw:ch`.
    Read,
    /// A read-write lock's writers: the same value, channel `...:rw:w:ch`.
    Write,
    /// A multi-key lock, in the metrics' `primitive` label only: each of
    /// its keys is a lock ([`Kind::Mutex`]) in Redis.
    Multi,
}

impl Kind {
    /// Whether the scripts are the semaphore's (everything but a lock).
    pub(crate) fn counted(self) -> bool {
        matches!(self, Kind::Semaphore | Kind::Read | Kind::Write)
    }

    /// The primitive's name in spans and in the metrics' `primitive` label:
    /// `mutex`, `semaphore`, `read`, `write`, `multi`.
    pub(crate) const fn label(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Semaphore => "semaphore",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Multi => "multi",
        }
    }

    /// What follows `<prefix>:4:{<key>}` in the value's name.
    fn suffix(self) -> &'static str {
        match self {
            Kind::Mutex | Kind::Multi => "",
            Kind::Semaphore => ":sem",
            Kind::Read | Kind::Write => ":rw",
        }
    }
}

/// The Redis names of one lock or semaphore. Every name starts with
/// `<prefix>:4:{<key>}` so they all hash to the same cluster slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Names {
    /// The value: `<prefix>:4:{<key>}` for a lock (see [the
    /// protocol](super)), `<prefix>:4:{<key>}:sem` for a semaphore,
    /// `<prefix>:4:{<key>}:rw` for a read-write lock.
    pub(crate) lock: Str,
    /// `<value>:ch`: the release channel.
    pub(crate) channel: Str,
    pub(crate) kind: Kind,
}

impl Names {
    /// The value name of the primitive whose release channel is `channel`
    /// (for the paths that have only the channel at hand).
    pub(crate) fn lock_of_channel(channel: &str) -> &str {
        channel.strip_suffix(":ch").unwrap_or(channel)
    }

    /// The primitive whose release channel is `channel`: a lock's value
    /// name always ends with `}`, a semaphore's with `}:sem`, a read-write
    /// lock's readers' channel with `}:rw:ch` and its writers' with
    /// `}:rw:w:ch`.
    pub(crate) fn kind_of_channel(channel: &str) -> Kind {
        let name = Self::lock_of_channel(channel);
        if name.ends_with("}:sem") {
            Kind::Semaphore
        } else if name.ends_with("}:rw") {
            Kind::Read
        } else if name.ends_with("}:rw:w") {
            Kind::Write
        } else {
            Kind::Mutex
        }
    }

    /// The value's name for the names whose channel is `channel` (a
    /// writers' channel `...:rw:w:ch` belongs to the value `...:rw`).
    pub(crate) fn value_of_channel(channel: &str) -> &str {
        let name = Self::lock_of_channel(channel);
        match Self::kind_of_channel(channel) {
            Kind::Write => name.strip_suffix(":w").unwrap_or(name),
            _ => name,
        }
    }

    /// The channels the semaphore scripts publish on: the primitive's
    /// channel, and for a read-write lock (whichever role calls) its
    /// readers' channel and its writers' channel (`""` otherwise): a
    /// writer-role client's messages go to the writers' channel.
    pub(crate) fn script_channels(&self) -> (String, String) {
        match self.kind {
            Kind::Read | Kind::Write => {
                (format!("{}:ch", self.lock), format!("{}:w:ch", self.lock))
            }
            _ => (self.channel.to_string(), String::new()),
        }
    }

    /// `<value>:void:<token>`: marks an abandoned acquisition.
    pub(crate) fn void(&self, token: &str) -> String {
        let mut name = String::with_capacity(self.lock.len() + 6 + token.len());
        name.push_str(&self.lock);
        name.push_str(":void:");
        name.push_str(token);
        name
    }

    /// `<value>:f`: a lock's record, the hash of its fence counter `f` and
    /// its ring of released fences (see [the protocol](super)).
    pub(crate) fn record(&self) -> String {
        let mut name = String::with_capacity(self.lock.len() + 2);
        name.push_str(&self.lock);
        name.push_str(":f");
        name
    }

    /// `<value>:q`: since when each queued client waits, for operators
    /// ([`QUEUE_TIMES`]).
    pub(crate) fn queue_times(&self) -> String {
        let mut name = String::with_capacity(self.lock.len() + QUEUE_TIMES.len());
        name.push_str(&self.lock);
        name.push_str(QUEUE_TIMES);
        name
    }

    /// `<value>:void`: until when any void marker of the primitive may
    /// exist (read when its value is gone).
    pub(crate) fn voids(&self) -> String {
        let mut name = String::with_capacity(self.lock.len() + 5);
        name.push_str(&self.lock);
        name.push_str(":void");
        name
    }

    /// A semaphore's (or read-write lock's) expiry index and facts,
    /// `(<value>:h, <value>:t)`.
    pub(crate) fn side(&self) -> (String, String) {
        Self::side_of(&self.lock)
    }

    /// [`side`](Self::side) for the value named `value`.
    pub(crate) fn side_of(value: &str) -> (String, String) {
        (format!("{value}:h"), format!("{value}:t"))
    }

    /// The names whose channel is `channel` (for the paths that have only
    /// the channel at hand).
    pub(crate) fn of_channel(channel: &str) -> Self {
        // One buffer, the value's name its prefix, as `build` makes them.
        let lock_len = Self::value_of_channel(channel).len();
        let channel = Str::from(channel);
        Names {
            lock: channel.slice(..lock_len),
            kind: Self::kind_of_channel(&channel),
            channel,
        }
    }

    /// The names of the lock on `key`.
    pub(crate) fn new(prefix: &str, key: &str) -> Self {
        Self::build(prefix, key, Kind::Mutex)
    }

    /// The names of the semaphore `key`.
    pub(crate) fn semaphore(prefix: &str, key: &str) -> Self {
        Self::build(prefix, key, Kind::Semaphore)
    }

    /// The names of the read-write lock `key`, for a reader (`Kind::Read`)
    /// or a writer (`Kind::Write`): one value, two channels.
    pub(crate) fn rw(prefix: &str, key: &str, kind: Kind) -> Self {
        Self::build(prefix, key, kind)
    }

    /// What stays behind where names were moved out (a guard's, a lock
    /// call's): empty, and built without allocating.
    pub(crate) fn taken() -> Self {
        Names {
            lock: Str::new(),
            channel: Str::new(),
            kind: Kind::Mutex,
        }
    }

    fn build(prefix: &str, key: &str, kind: Kind) -> Self {
        let mut buf = String::with_capacity(Self::written_len(prefix, key));
        let (lock_len, channel_len) = Self::write(&mut buf, prefix, key, kind);
        Self::in_buffer(&Str::from(buf), lock_len, channel_len, kind)
    }

    /// The names of `key` for `kind` (as [`new`](Self::new),
    /// [`semaphore`](Self::semaphore) and [`rw`](Self::rw) make them) and a
    /// new token ([`crate::token`]) for one lock call, in one buffer: two
    /// allocations (the buffer, and the header that shares it) instead of
    /// four.
    pub(crate) fn for_call(prefix: &str, key: &str, kind: Kind, client: &str) -> (Self, Str) {
        let mut buf = String::with_capacity(Self::written_len(prefix, key) + crate::token::LEN);
        let (lock_len, channel_len) = Self::write(&mut buf, prefix, key, kind);
        crate::token::push(&mut buf, client);
        let buf = Str::from(buf);
        let token = buf.slice(channel_len..);
        (Self::in_buffer(&buf, lock_len, channel_len, kind), token)
    }

    /// `key`, which these names were built for, as a slice of the value's
    /// name: no copy. (A key the name does not hold, which does not happen,
    /// is copied.)
    pub(crate) fn key_in(&self, key: &str) -> Str {
        // `...{<key>}<suffix>`
        let end = self.lock.len().saturating_sub(self.kind.suffix().len() + 1);
        let start = end.saturating_sub(key.len());
        match self.lock.get(start..end) {
            Some(k) if k == key => self.lock.slice(start..end),
            _ => Str::from(key),
        }
    }

    /// Room for what [`write`](Self::write) appends for `prefix` and `key`:
    /// those and at most 13 bytes more (`:4:{`, `}`, `:rw`, `:w:ch`).
    fn written_len(prefix: &str, key: &str) -> usize {
        prefix.len() + key.len() + 17
    }

    /// Append the channel's name to `buf`; the value's name is its prefix.
    /// Returns both lengths. Built without `format!`: this runs once per
    /// lock call.
    fn write(buf: &mut String, prefix: &str, key: &str, kind: Kind) -> (usize, usize) {
        buf.push_str(prefix);
        buf.push(':');
        buf.push(char::from(b'0' + PROTOCOL as u8));
        buf.push_str(":{");
        buf.push_str(key);
        buf.push('}');
        buf.push_str(kind.suffix());
        let lock_len = buf.len();
        if kind == Kind::Write {
            buf.push_str(":w");
        }
        buf.push_str(":ch");
        (lock_len, buf.len())
    }

    /// The names [`write`](Self::write) put at the start of `buf`. Both are
    /// slices of one shared buffer, so cloning them (a guard, the watchdog,
    /// every script argument) copies nothing.
    fn in_buffer(buf: &Str, lock_len: usize, channel_len: usize, kind: Kind) -> Self {
        Names {
            lock: buf.slice(..lock_len),
            channel: buf.slice(..channel_len),
            kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_names_token_and_key_share_one_buffer() {
        for (kind, key) in [
            (Kind::Mutex, "orders:42"),
            (Kind::Mutex, "x}:sem"),
            (Kind::Mutex, "{odd}"),
            (Kind::Semaphore, "payments"),
            (Kind::Read, "k"),
            (Kind::Write, "k}:rw"),
            (Kind::Mutex, ""),
        ] {
            let built = Names::build("relaylock", key, kind);
            let (names, token) = Names::for_call("relaylock", key, kind, "0123456789abcdef");
            assert_eq!(names, built, "{kind:?} {key}");
            assert_eq!(token.len(), crate::token::LEN);
            assert_eq!(crate::token::client_of(&token), Some("0123456789abcdef"));
            let k = names.key_in(key);
            assert_eq!(k, key, "{kind:?}");
            // A slice of the value's name, not a copy.
            let within = names.lock.as_bytes().as_ptr_range();
            assert!(
                key.is_empty() || within.contains(&k.as_bytes().as_ptr()),
                "{kind:?} {key}"
            );
        }
        let (_, a) = Names::for_call("p", "k", Kind::Mutex, "0123456789abcdef");
        let (_, b) = Names::for_call("p", "k", Kind::Mutex, "0123456789abcdef");
        assert_ne!(a, b);
        // Asked for another key (never done), it still answers that key.
        assert_eq!(Names::new("p", "k").key_in("other"), "other");
    }

    #[test]
    fn names_share_one_hash_tag() {
        let n = Names::new("relaylock", "orders:42");
        assert_eq!(n.lock, "relaylock:4:{orders:42}");
        assert_eq!(n.channel, "relaylock:4:{orders:42}:ch");
        assert_eq!(n.void("t"), "relaylock:4:{orders:42}:void:t");
        assert_eq!(n.voids(), "relaylock:4:{orders:42}:void");
        assert_eq!(Names::lock_of_channel(&n.channel), n.lock);
        let odd = Names::new("p", "x}:ch");
        assert_eq!(Names::lock_of_channel(&odd.channel), odd.lock);
        let s = Names::semaphore("relaylock", "payments");
        assert_eq!(s.lock, "relaylock:4:{payments}:sem");
        assert_eq!(s.channel, "relaylock:4:{payments}:sem:ch");
        assert_eq!(s.side().0, "relaylock:4:{payments}:sem:h");
        assert_eq!(Names::of_channel(&s.channel), s);
        assert_eq!(Names::kind_of_channel(&s.channel), Kind::Semaphore);
        assert_eq!(Names::kind_of_channel(&n.channel), Kind::Mutex);
        // A lock whose key ends like a semaphore's name is still a lock.
        let tricky = Names::new("p", "x}:sem");
        assert_eq!(Names::kind_of_channel(&tricky.channel), Kind::Mutex);
        let r = Names::rw("p", "k", Kind::Read);
        let w = Names::rw("p", "k", Kind::Write);
        assert_eq!(r.lock, "p:4:{k}:rw");
        assert_eq!(w.lock, r.lock);
        assert_eq!(r.channel, "p:4:{k}:rw:ch");
        assert_eq!(w.channel, "p:4:{k}:rw:w:ch");
        assert_eq!(Names::kind_of_channel(&r.channel), Kind::Read);
        assert_eq!(Names::kind_of_channel(&w.channel), Kind::Write);
        assert_eq!(Names::value_of_channel(&w.channel), w.lock);
        assert_eq!(Names::value_of_channel(&r.channel), r.lock);
        assert_eq!(Names::of_channel(&w.channel), w);
        assert_eq!(Names::of_channel(&n.channel), n);
        assert_eq!(
            w.script_channels(),
            (r.channel.to_string(), w.channel.to_string())
        );
        let s = Names::semaphore("p", "k");
        assert_eq!(s.script_channels(), (s.channel.to_string(), String::new()));
        assert_eq!(
            Names::kind_of_channel(&Names::new("p", "x}:rw").channel),
            Kind::Mutex
        );
    }

    #[test]
    fn lock_names_never_collide_with_void_names() {
        // A lock name always ends with '}', a void marker's name never does
        // (a token is never empty).
        let a = Names::new("p", "x}:void:t");
        let b = Names::new("p", "x");
        assert_ne!(a.lock, b.void("t"));
        assert!(a.lock.ends_with('}'));
    }
}
