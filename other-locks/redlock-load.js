// node-redlock under contention: --workers async workers in one process take
// one key in a loop (acquire, hold --hold-ms, release) for --duration-s, and
// the program prints one JSON line (same fields as the other load programs of
// this folder, see README.md).
//
//   node redlock-load.js --url redis://127.0.0.1:6379 [--module redlock|redlock-5]
//
// --module redlock   is the npm package `redlock` at its `latest` tag (4.2.0):
//                    lock(key, ttl) / unlock();
// --module redlock-5 is `redlock@5.0.0-beta.2` (the API of the GitHub README):
//                    acquire([key], ttl) / release().
// Waiting is redlock's own: a failed attempt is retried after retryDelay
// (200 ms) +- retryJitter (100 ms), the defaults of both versions. Only
// retryCount is changed, to -1 (retry without limit, as documented), since
// the default of 10 retries gives up after about 2 s, which is shorter than
// a waiter's turn with 256 workers (--retry-count 10 shows it: errors).
"use strict";
const fs = require("fs");
const path = require("path");
const Redis = require("ioredis");

const opt = { url: "redis://127.0.0.1:6379", module: "redlock", workers: 256, "hold-ms": 1, "duration-s": 6, "lease-s": 10, "retry-count": -1 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const k = argv[i].replace(/^--/, "");
  if (!(k in opt)) throw new Error(`unknown argument ${argv[i]}`);
  opt[k] = typeof opt[k] === "number" ? Number(argv[i + 1]) : argv[i + 1];
}

const version = JSON.parse(fs.readFileSync(path.join(__dirname, "node_modules", opt.module, "package.json"))).version;
const iover = JSON.parse(fs.readFileSync(path.join(__dirname, "node_modules", "ioredis", "package.json"))).version;
const v4 = version.startsWith("4.");
const mod = require(opt.module);
const Redlock = mod.default || mod;

const client = new Redis(opt.url);
const admin = new Redis(opt.url);
const redlock = new Redlock([client], { retryCount: opt["retry-count"] });
redlock.on("clientError", () => {}); // errors surface as rejected locks below
const key = `redlock-load-${process.pid}`;
const ttl = Math.round(opt["lease-s"] * 1000);
const lock = v4 ? () => redlock.lock(key, ttl) : () => redlock.acquire([key], ttl);
const unlock = v4 ? (l) => l.unlock() : (l) => l.release();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();

const counts = new Array(opt.workers).fill(0);
const waits = [], holds = [];
let inside = 0, violations = 0, errors = 0, firstError = null;
let deadline = Infinity;

async function worker(i) {
  while (now() < deadline) {
    const tCall = now();
    let l;
    try {
      l = await lock();
    } catch (e) {
      errors++;
      firstError ??= String(e && e.message);
      await sleep(10);
      continue;
    }
    const tAcq = now();
    if (inside++ !== 0) violations++;
    if (tAcq <= deadline) { // only acquisitions within the timed phase count
      counts[i]++;
      waits.push(tAcq - tCall);
    }
    await sleep(opt["hold-ms"]);
    inside--;
    if (tAcq <= deadline) holds.push(now() - tAcq);
    try {
      await unlock(l);
    } catch (e) {
      errors++;
      firstError ??= String(e && e.message);
    }
  }
}

function commandCalls(info) {
  const out = {};
  for (const line of info.split("\n")) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
    if (m && !m[1].startsWith("info") && !m[1].startsWith("config")) out[m[1]] = Number(m[2]);
  }
  return out;
}
const cpuSeconds = (info) =>
  ["used_cpu_user", "used_cpu_sys"].reduce((s, f) => s + Number(new RegExp(`^${f}:([\\d.]+)`, "m").exec(info)[1]), 0);
const percentile = (sorted, p) =>
  sorted.length ? sorted[Math.min(Math.max(Math.ceil((p / 100) * sorted.length), 1), sorted.length) - 1] : null;
function jain(c) {
  const sum = c.reduce((a, b) => a + b, 0), sq = c.reduce((a, b) => a + b * b, 0);
  return sq === 0 ? 0 : (sum * sum) / (c.length * sq);
}

async function main() {
  // Warm-up outside the timed phase: connect and load the scripts.
  await unlock(await lock());
  const cpu0 = cpuSeconds(await admin.info("cpu"));
  await admin.config("RESETSTAT");
  const start = now();
  deadline = start + opt["duration-s"] * 1000;
  for (let i = 0; i < opt.workers; i++) worker(i);
  await sleep(deadline - now());
  while (now() < deadline) await sleep(1);
  const calls = commandCalls(await admin.info("commandstats"));
  const cpuUs = (cpuSeconds(await admin.info("cpu")) - cpu0) * 1e6;
  const elapsed = (now() - start) / 1000;

  // redlock sends only EVALSHA (EVAL on NOSCRIPT); EXISTS, SET, GET and DEL
  // run inside its scripts.
  const requests = Object.entries(calls)
    .filter(([c]) => c === "evalsha" || c === "eval" || c.startsWith("script"))
    .reduce((s, [, n]) => s + n, 0);
  const commands = Object.values(calls).reduce((s, n) => s + n, 0);
  const sorted = waits.slice().sort((a, b) => a - b);
  const acq = sorted.length;
  const perAcq = (x) => (acq ? x / acq : null);
  console.log(JSON.stringify({
    lock: `redlock ${version.replace(/^v/, "")} (node ${process.version}, ioredis ${iover})`,
    strategy: `retry: every 200 ms +- 100 ms jitter (defaults), retryCount ${opt["retry-count"]}`,
    workers: opt.workers,
    processes: 1,
    keys: 1,
    hold_ms: opt["hold-ms"],
    lease_s: opt["lease-s"],
    duration_s: elapsed,
    acquisitions: acq,
    acq_per_s: acq / elapsed,
    wait_p50_ms: percentile(sorted, 50),
    wait_p99_ms: percentile(sorted, 99),
    wait_max_ms: percentile(sorted, 100),
    hold_p50_ms: percentile(holds.slice().sort((a, b) => a - b), 50),
    redis_requests_per_acq: perAcq(requests),
    redis_cmds_per_acq: perAcq(commands),
    redis_cpu_us_per_acq: perAcq(cpuUs),
    jain_fairness: jain(counts),
    workers_with_acq: counts.filter((c) => c > 0).length,
    violations,
    errors,
    first_error: firstError,
    peak_rss_mib: process.resourceUsage().maxRSS / 1024,
    redis_calls: calls,
  }));
  // Workers still waiting are abandoned; the key expires with its lease.
  await admin.del(key).catch(() => {});
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
