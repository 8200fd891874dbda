//! `relaylock run` with real processes against a real redis-server: runs on
//! one key never overlap, exit statuses, a SIGKILLed `run`, a lock taken away
//! mid-run, signals passed on.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::libc;
use relaylock_testkit::RedisServer;

fn relaylock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_relaylock"))
}

/// `relaylock run --url <server> <extra...> KEY -- sh -c SCRIPT`, with
/// SIGINT and SIGTERM at their default action whatever this test inherited:
/// `run` leaves a signal inherited as ignored alone (nohup, a background
/// job), and a test suite started as a background job of a shell without job
/// control inherits SIGINT ignored (found running .ci/run that way: the
/// signal tests then waited for a SIGINT that `run` rightly ignored).
fn run(server: &RedisServer, extra: &[&str], key: &str, script: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = relaylock();
    c.args(["run", "--url", &server.url()])
        .args(extra)
        .args([key, "--", "sh", "-c", script]);
    // SAFETY: between fork and exec only `signal`, which is
    // async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    c
}

/// The marks `runs` commands left, `start X` then `end X` each: checks
/// that there are that many and that none interleaves another (every start
/// is followed by its own end); returns each run's X in order.
fn marked_runs(text: &str, runs: usize) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * runs, "{text}");
    lines
        .chunks(2)
        .map(|pair| {
            let start = pair[0].strip_prefix("start ").expect(text);
            let end = pair[1].strip_prefix("end ").expect(text);
            assert_eq!(start, end, "marks interleave:\n{text}");
            start
        })
        .collect()
}

fn redis_cli(server: &RedisServer, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &server.port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli (installed with redis-server)");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn lock_key(key: &str) -> String {
    format!("relaylock:{}:{{{key}}}", relaylock::PROTOCOL)
}

/// Held: the lock's value has a token head (not a tombstone `-`, not absent).
fn held(server: &RedisServer, key: &str) -> bool {
    let v = redis_cli(server, &["GET", &lock_key(key)]);
    !v.is_empty() && !v.starts_with('-') && !v.starts_with('~')
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

fn wait_child(child: &mut Child, limit: Duration) -> ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("the process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill(pid: u32, signal: i32) {
    let signal = nix::sys::signal::Signal::try_from(signal).unwrap();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
}

fn alive(pid: u32) -> bool {
    // /proc/<pid>/stat's state: gone, or a zombie, is not alive.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// This test process's folder of marks and pid files, removed when the
/// process exits (the tests share it, so none of them may remove it).
fn temp_dir() -> PathBuf {
    std::env::temp_dir().join(format!("relaylock-run-{}", std::process::id()))
}

extern "C" fn remove_temp_dir() {
    let _ = std::fs::remove_dir_all(temp_dir());
}

fn temp_file(name: &str) -> PathBuf {
    static CLEAN_UP: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain function to run at exit; it only removes files.
    CLEAN_UP.call_once(|| unsafe {
        libc::atexit(remove_temp_dir);
    });
    let dir = temp_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn read_pid(path: &Path) -> u32 {
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(path)
            .is_ok_and(|s| s.ends_with('\n'))),
        "the command never wrote its pid"
    );
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A `run` holding `key` with a 30 s command, started and holding.
struct Holder(Child);

impl Holder {
    fn start(server: &RedisServer, key: &str) -> Self {
        let pid = temp_file(&format!("{key}-holder-pid"));
        let child = run(
            server,
            &[],
            key,
            &format!("echo $$ > {}; sleep 30", pid.display()),
        )
        .spawn()
        .unwrap();
        read_pid(&pid);
        Holder(child)
    }

    /// SIGTERM, passed to the command: the run releases and exits.
    fn stop(mut self) {
        kill(self.0.id(), libc::SIGTERM);
        wait_child(&mut self.0, Duration::from_secs(10));
    }
}

/// Three processes each run the command five times on one key; every child
/// appends `start <fence>` and `end <fence>` around a short sleep. The marks
/// never interleave and the fences increase.
#[test]
fn runs_on_one_key_never_overlap() {
    let server = RedisServer::start();
    let marks = temp_file("marks");
    let script = format!(
        "echo \"start $RELAYLOCK_FENCE\" >> {m}; sleep 0.05; echo \"end $RELAYLOCK_FENCE\" >> {m}",
        m = marks.display()
    );
    let started = Instant::now();
    let loops: Vec<_> = (0..3)
        .map(|_| {
            let url = server.url();
            let script = script.clone();
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let status = relaylock()
                        .args(["run", "--url", &url, "--wait", "30s", "job", "--"])
                        .args(["sh", "-c", &script])
                        .status()
                        .unwrap();
                    assert!(status.success(), "run failed: {status}");
                }
            })
        })
        .collect();
    for l in loops {
        l.join().unwrap();
    }
    let text = std::fs::read_to_string(&marks).unwrap();
    let mut last = 0u64;
    for start in marked_runs(&text, 15) {
        let fence: u64 = start.parse().unwrap();
        assert!(fence > last, "fences do not increase:\n{text}");
        last = fence;
    }
    println!(
        "15 runs of 3 processes on one key: no overlap, fences increasing, {:?} in all",
        started.elapsed()
    );
    assert!(!held(&server, "job"), "the lock stayed held");
}

/// The command's status is `run`'s; a signal's death is 128 + N; a missing
/// command is 127.
#[test]
fn exit_statuses() {
    let server = RedisServer::start();
    let status = run(&server, &[], "s", "exit 3").status().unwrap();
    assert_eq!(status.code(), Some(3));
    let status = run(&server, &[], "s", "kill -KILL $$").status().unwrap();
    assert_eq!(status.code(), Some(137));
    let status = relaylock()
        .args([
            "run",
            "--url",
            &server.url(),
            "s",
            "--",
            "no-such-command-here",
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(127));
    assert!(!held(&server, "s"), "a run that ended left the lock held");
    // Redis unreachable: 69, at once.
    let status = relaylock()
        .args(["run", "--url", "redis://127.0.0.1:1", "s", "--", "true"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(69));
}

/// `--wait 0` fails at once when the key is held; a timed-out wait exits
/// 75, or the `-E` status; neither runs the command.
#[test]
fn a_held_key_times_out_with_its_own_status() {
    let server = RedisServer::start();
    let ran = temp_file("ran");
    let holder = Holder::start(&server, "busy");
    let touch = format!("touch {}", ran.display());
    let t = Instant::now();
    let status = run(&server, &["--wait", "0"], "busy", &touch)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let at_once = t.elapsed();
    assert_eq!(status.code(), Some(75));
    let t = Instant::now();
    let status = run(&server, &["--wait", "300ms", "-E", "9"], "busy", &touch)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let waited = t.elapsed();
    assert_eq!(status.code(), Some(9));
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(!ran.exists(), "the command ran without the lock");
    println!("--wait 0 on a held key: exit 75 in {at_once:?}; --wait 300ms -E 9: exit 9 after {waited:?}");
    holder.stop();
}

/// flock's short options: `-n` fails at once on a held key, `-w 300ms`
/// waits that long; durations read as humantime does (`--lease 1h`); the
/// prefix comes from `RELAYLOCK_PREFIX` as the URL comes from
/// `RELAYLOCK_URL`.
#[test]
fn flock_options_humantime_durations_and_the_prefix_from_the_environment() {
    let server = RedisServer::start();
    let ran = temp_file("ran-flock");
    let touch = format!("touch {}", ran.display());
    let holder = Holder::start(&server, "busy");
    let status = run(&server, &["-n"], "busy", &touch)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(75));
    let t = Instant::now();
    let status = run(&server, &["-w", "300ms"], "busy", &touch)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(75));
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(!ran.exists(), "the command ran without the lock");
    // Another prefix is another lock: the same key is free there.
    let status = run(&server, &["-n", "--lease", "1h"], "busy", &touch)
        .env("RELAYLOCK_PREFIX", "other")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(ran.exists());
    let status = run(&server, &["--lease", "25h"], "free", "true")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2), "clap refuses a lease over 24 h");
    holder.stop();
}

/// A SIGKILLed `run` cannot release: the key frees when its lease ends, and
/// its command is killed with it (PR_SET_PDEATHSIG), not left running
/// unlocked.
#[test]
fn a_killed_run_frees_the_key_within_its_lease() {
    let server = RedisServer::start();
    let pid_file = temp_file("killed-pid");
    let mut victim = run(
        &server,
        &["--lease", "2s"],
        "crash",
        &format!("echo $$ > {}; exec sleep 60", pid_file.display()),
    )
    .spawn()
    .unwrap();
    let command = read_pid(&pid_file);
    assert!(held(&server, "crash"));
    kill(victim.id(), libc::SIGKILL);
    wait_child(&mut victim, Duration::from_secs(5));
    let killed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(2), || !alive(command)),
        "the command outlived its run"
    );
    let status = run(&server, &["--wait", "10s"], "crash", "true")
        .status()
        .unwrap();
    let freed = killed.elapsed();
    assert!(status.success());
    println!(
        "SIGKILLed run (lease 2 s): its command gone, the key taken again {freed:?} after the kill"
    );
    assert!(freed <= Duration::from_secs(3), "{freed:?}");
}

/// The lock taken away while the command runs (its key deleted, then taken
/// by someone else): `run` notices at its next renewal, sends the command
/// SIGTERM, SIGKILL after `--kill-after`, and exits 76.
#[test]
fn a_lock_taken_away_stops_the_command() {
    let server = RedisServer::start();
    let pid_file = temp_file("lost-pid");
    let term = temp_file("lost-term");
    // The command ignores SIGTERM (it notes it), so SIGKILL must follow;
    // and it started a process of its own, which must stop too.
    let grandchild = temp_file("lost-grandchild");
    let script = format!(
        "sleep 60 & echo $! > {g}; trap 'echo term >> {t}' TERM; echo $$ > {p}; while true; do sleep 0.05; done",
        g = grandchild.display(),
        t = term.display(),
        p = pid_file.display()
    );
    let mut victim = run(
        &server,
        &["--lease", "1500ms", "--kill-after", "500ms"],
        "taken",
        &script,
    )
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let command = read_pid(&pid_file);
    let started = read_pid(&grandchild);
    let key = lock_key("taken");
    assert_eq!(redis_cli(&server, &["DEL", &key]), "1");
    assert_eq!(redis_cli(&server, &["SET", &key, "someone-else"]), "OK");
    let taken = Instant::now();
    let status = wait_child(&mut victim, Duration::from_secs(10));
    let stopped = taken.elapsed();
    assert_eq!(status.code(), Some(76));
    assert!(!alive(command), "the command outlived the lost lock");
    assert!(
        wait_until(Duration::from_secs(2), || !alive(started)),
        "a process the command started outlived the lost lock"
    );
    assert!(
        std::fs::read_to_string(&term).is_ok_and(|t| t.contains("term")),
        "the command never got SIGTERM"
    );
    assert_eq!(
        redis_cli(&server, &["GET", &key]),
        "someone-else",
        "run touched the new owner's value"
    );
    println!("lock taken away (lease 1.5 s, kill-after 0.5 s): command stopped, run exited 76 after {stopped:?}");
    assert!(
        stopped <= Duration::from_millis(1500 + 500 + 1000),
        "{stopped:?}"
    );
}

/// SIGTERM and SIGINT to `run` reach the command; `run` exits with the
/// command's status and releases the lock.
#[test]
fn signals_are_passed_to_the_command() {
    let server = RedisServer::start();
    for (signal, name) in [(libc::SIGTERM, "TERM"), (libc::SIGINT, "INT")] {
        let pid_file = temp_file(&format!("sig-{name}"));
        let script = format!(
            "trap 'exit 7' {name}; echo $$ > {p}; while true; do sleep 0.05; done",
            p = pid_file.display()
        );
        let mut r = run(&server, &[], "sig", &script).spawn().unwrap();
        read_pid(&pid_file);
        kill(r.id(), signal);
        let status = wait_child(&mut r, Duration::from_secs(10));
        assert_eq!(status.code(), Some(7), "SIG{name}");
        assert!(!held(&server, "sig"), "SIG{name}: the lock stayed held");
    }
}

/// A signal `run` inherited as ignored (nohup, a shell's background job)
/// stays ignored for the command: SIGHUP to `run` neither stops the
/// command nor is passed on.
#[test]
fn an_ignored_signal_stays_ignored() {
    let server = RedisServer::start();
    let pid_file = temp_file("nohup-pid");
    let script = format!("echo $$ > {p}; sleep 1; exit 5", p = pid_file.display());
    // `trap '' HUP` in the shell that execs run: run starts with SIGHUP
    // ignored.
    let mut r = Command::new("sh")
        .args(["-c", "trap '' HUP; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_relaylock"))
        .args([
            "run",
            "--url",
            &server.url(),
            "hup",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    let command = read_pid(&pid_file);
    let ignored = std::fs::read_to_string(format!("/proc/{command}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    assert_ne!(
        ignored & (1 << (libc::SIGHUP - 1)),
        0,
        "SIGHUP not ignored in the command"
    );
    kill(r.id(), libc::SIGHUP);
    let status = wait_child(&mut r, Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(5),
        "the command did not finish on its own"
    );
}

/// SIGINT to `run` while it waits for the lock: it ends by SIGINT, nothing
/// ran, and nothing is left held or queued.
#[test]
fn a_signal_while_waiting_leaves_nothing_behind() {
    let server = RedisServer::start();
    let holder = Holder::start(&server, "wait-sig");
    let ran = temp_file("waiting-ran");
    let mut waiter = run(
        &server,
        &[],
        "wait-sig",
        &format!("touch {}", ran.display()),
    )
    .spawn()
    .unwrap();
    let key = lock_key("wait-sig");
    assert!(
        wait_until(Duration::from_secs(10), || redis_cli(
            &server,
            &["GET", &key]
        )
        .split('|')
        .nth(1)
        .is_some_and(|q| !q.is_empty())),
        "the waiting run never queued"
    );
    kill(waiter.id(), libc::SIGINT);
    let status = wait_child(&mut waiter, Duration::from_secs(10));
    // Ended by the signal itself, as an uncaught SIGINT would (a shell
    // shows 130).
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status}");
    assert!(!ran.exists(), "the command ran");
    let queue = redis_cli(&server, &["GET", &key]);
    assert_eq!(
        queue.split('|').nth(1),
        Some(""),
        "the interrupted run stayed queued: {queue}"
    );
    holder.stop();
}

/// An operator's unlock stops the command at once (issue 36): `run` hears
/// it on its client's control channel, its lock is lost within a few round
/// trips (not at its next renewal, a third of its 60 s lease), the command
/// gets SIGTERM, and `run` exits 76. Before, the command ran on to its end
/// and `run` exited 76 after it.
#[test]
fn an_unlock_stops_the_command_at_once() {
    let server = RedisServer::start();
    let pid_file = temp_file("unlocked-pid");
    let term = temp_file("unlocked-term");
    let script = format!(
        "trap 'echo term >> {t}; exit 143' TERM; echo $$ > {p}; while true; do sleep 0.05; done",
        t = term.display(),
        p = pid_file.display()
    );
    let mut victim = run(&server, &["--lease", "60s"], "unlocked", &script)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let command = read_pid(&pid_file);
    let value = redis_cli(&server, &["GET", &lock_key("unlocked")]);
    let token = value.split(':').next().unwrap().to_owned();
    let out = relaylock()
        .args([
            "unlock",
            "--url",
            &server.url(),
            "unlocked",
            "--token",
            &token,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unlocked = Instant::now();
    let status = wait_child(&mut victim, Duration::from_secs(10));
    let stopped = unlocked.elapsed();
    println!("unlocked (lease 60 s): command stopped, run exited 76 after {stopped:?}");
    assert_eq!(status.code(), Some(76));
    assert!(!alive(command), "the command outlived the unlock");
    assert!(
        std::fs::read_to_string(&term).is_ok_and(|t| t.contains("term")),
        "the command never got SIGTERM"
    );
    assert!(stopped < Duration::from_secs(2), "{stopped:?}");
}

/// Several keys: one multi-key lock. Processes naming the same keys in
/// opposite orders never overlap on any key and never deadlock; the
/// command sees `RELAYLOCK_FENCES` (`key=fence` pairs) and every key is
/// free at the end.
#[test]
fn runs_on_several_keys_take_them_together_in_any_order() {
    let server = RedisServer::start();
    let marks = temp_file("multi-marks");
    let script = format!(
        "echo \"start $RELAYLOCK_FENCES\" >> {m}; sleep 0.05; echo \"end $RELAYLOCK_FENCES\" >> {m}",
        m = marks.display()
    );
    let orders: [&[&str]; 3] = [&["a", "b", "c"], &["c", "b", "a"], &["b", "a"]];
    let loops: Vec<_> = orders
        .iter()
        .map(|keys| {
            let url = server.url();
            let script = script.clone();
            let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            std::thread::spawn(move || {
                for _ in 0..4 {
                    let status = relaylock()
                        .args(["run", "--url", &url, "--wait", "30s"])
                        .args(&keys)
                        .args(["--", "sh", "-c", &script])
                        .status()
                        .unwrap();
                    assert!(status.success(), "run failed: {status}");
                }
            })
        })
        .collect();
    for l in loops {
        l.join().unwrap();
    }
    let text = std::fs::read_to_string(&marks).unwrap();
    // Every pair of runs shares key b: the marks never interleave.
    for start in marked_runs(&text, 12) {
        let pairs: Vec<(&str, u64)> = start
            .split(' ')
            .map(|p| {
                let (k, f) = p.split_once('=').expect(&text);
                (k, f.parse().expect(&text))
            })
            .collect();
        assert!(pairs.len() == 2 || pairs.len() == 3, "{text}");
        assert!(pairs.iter().any(|(k, _)| *k == "b"));
    }
    for key in ["a", "b", "c"] {
        assert!(!held(&server, key), "{key} stayed held");
    }
}

/// `relaylock elect`: three processes campaign in one election, each twice;
/// only the leader runs its command, the runs never overlap, and the terms
/// (`RELAYLOCK_FENCE`) rise; nothing is left held.
#[test]
fn elect_runs_the_command_only_while_leading() {
    let server = RedisServer::start();
    let marks = temp_file("elect-marks");
    let script = format!(
        "echo \"start $RELAYLOCK_FENCE\" >> {m}; sleep 0.1; echo \"end $RELAYLOCK_FENCE\" >> {m}",
        m = marks.display()
    );
    let loops: Vec<_> = (0..3)
        .map(|i| {
            let url = server.url();
            let script = script.clone();
            std::thread::spawn(move || {
                for _ in 0..2 {
                    let status = relaylock()
                        .args(["elect", "--value", &format!("p{i}"), "--url", &url])
                        .args(["--wait", "30s", "jobs", "--", "sh", "-c", &script])
                        .status()
                        .unwrap();
                    assert!(status.success(), "elect failed: {status}");
                }
            })
        })
        .collect();
    for l in loops {
        l.join().unwrap();
    }
    let text = std::fs::read_to_string(&marks).unwrap();
    let mut last = 0u64;
    for start in marked_runs(&text, 6) {
        let term: u64 = start.parse().unwrap();
        assert!(term > last, "terms do not rise:\n{text}");
        last = term;
    }
    assert!(!held(&server, "election:jobs"));
}
