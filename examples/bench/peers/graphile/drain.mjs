#!/usr/bin/env node
// Drain-rate harness for graphile-worker, the peer of harel-jobs' `drain` benchmark.
//
//   node drain.mjs --jobs N --concurrency C [--mode best|default] [--database-url URL]
//                  [--warmup W] [--local-queue-size S] [--batch-delay MS]
//                  [--max-pool-size P] [--timeout-s T]
//
// Creates a database of its own on URL's server, installs graphile-worker's schema there,
// adds N no-op jobs of one task in one addJobs call (no job key, no named queue, so they
// may all run in parallel), ANALYZEs and CHECKPOINTs (as harel's bench does before a
// drain), then times a runner of concurrency C from its start until the handler has run
// N times and graphile_worker.jobs is empty. Prints one line on stdout:
//
//   graphile_drain jobs=N concurrency=C mode=M jobs_per_s=X seconds=Y version=V
//
// Context (settings, connections, node version) goes to stderr as '#' lines. The runner is
// stopped and the database dropped at the end, on an error and on SIGINT/SIGTERM.

import { readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import pg from "pg";

// graphile-worker logs one INFO line per completed job unless NO_LOG_SUCCESS is set; it
// reads the variable when its modules load, so set it before the import below.
process.env.NO_LOG_SUCCESS = "1";
const gw = await import("graphile-worker");

const TASK = "noop";

function usage(message) {
  if (message) console.error(`drain.mjs: ${message}`);
  console.error(
    "usage: node drain.mjs --jobs N --concurrency C [--mode best|default] " +
      "[--database-url URL] [--warmup W] [--local-queue-size S] [--batch-delay MS] " +
      "[--max-pool-size P] [--timeout-s T]",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    jobs: null,
    concurrency: null,
    mode: "best",
    databaseUrl:
      process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres",
    warmup: 0,
    localQueueSize: null,
    batchDelay: 0,
    maxPoolSize: null,
    timeoutS: 600,
  };
  const ints = {
    "--jobs": "jobs",
    "--concurrency": "concurrency",
    "--warmup": "warmup",
    "--local-queue-size": "localQueueSize",
    "--batch-delay": "batchDelay",
    "--max-pool-size": "maxPoolSize",
    "--timeout-s": "timeoutS",
  };
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i];
    let value;
    const eq = arg.indexOf("=");
    if (arg.startsWith("--") && eq > 0) {
      value = arg.slice(eq + 1);
      arg = arg.slice(0, eq);
    }
    const take = () => {
      if (value !== undefined) return value;
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === "-h" || arg === "--help") usage();
    else if (arg in ints) {
      const raw = take();
      const n = Number(raw);
      if (!Number.isInteger(n) || n < 0) usage(`${arg} wants a whole number, got '${raw}'`);
      opts[ints[arg]] = n;
    } else if (arg === "--mode") {
      const m = take();
      if (m !== "best" && m !== "default") usage(`--mode is best or default, got '${m}'`);
      opts.mode = m;
    } else if (arg === "--database-url") opts.databaseUrl = take();
    else usage(`unknown argument '${arg}'`);
  }
  if (!opts.jobs) usage("--jobs N (N > 0) is required");
  if (!opts.concurrency) usage("--concurrency C (C > 0) is required");
  return opts;
}

function installedVersion() {
  // The package's exports hide package.json; find it beside the resolved entry point.
  const entry = fileURLToPath(import.meta.resolve("graphile-worker"));
  const pkg = new URL("../package.json", `file://${entry}`);
  return JSON.parse(readFileSync(pkg, "utf8")).version;
}

// Warnings and errors only: per-job INFO/DEBUG lines would dominate a no-op drain.
const quietLogger = new gw.Logger(() => (level, message) => {
  if (level === "error" || level === "warning") {
    console.error(`# graphile-worker ${level}: ${message}`);
  }
});

/** The worker options of a mode, as a graphile-config preset. */
function workerPreset(opts, connectionString) {
  const worker = {
    connectionString,
    concurrentJobs: opts.concurrency,
    logger: quietLogger,
  };
  if (opts.mode === "best") {
    // dist/index.d.ts (GraphileConfig.WorkerOptions): localQueue.size, completeJobBatchDelay,
    // failJobBatchDelay (all default -1 = off); maxPoolSize "10 or concurrentJobs + 2,
    // whichever is larger". The performance page's configuration uses localQueue size 500
    // and both batch delays at 0.
    worker.localQueue = { size: opts.localQueueSize ?? Math.max(500, 4 * opts.concurrency) };
    worker.completeJobBatchDelay = opts.batchDelay;
    worker.failJobBatchDelay = opts.batchDelay;
    worker.maxPoolSize = opts.maxPoolSize ?? Math.max(10, opts.concurrency + 2);
  } else {
    if (opts.localQueueSize != null) worker.localQueue = { size: opts.localQueueSize };
    if (opts.maxPoolSize != null) worker.maxPoolSize = opts.maxPoolSize;
  }
  return worker;
}

function withDatabase(url, name) {
  const u = new URL(url);
  u.pathname = `/${name}`;
  return u.toString();
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function remainingJobs(client) {
  const { rows } = await client.query("select count(*)::int as n from graphile_worker.jobs");
  return rows[0].n;
}

/** Adds `n` no-op jobs in one addJobs call (one add_jobs statement). */
async function fill(connectionString, n) {
  const utils = await gw.makeWorkerUtils({ connectionString, logger: quietLogger });
  try {
    const specs = new Array(n);
    for (let i = 0; i < n; i++) specs[i] = { identifier: TASK, payload: {} };
    const added = await utils.addJobs(specs);
    if (added.length !== n) throw new Error(`addJobs returned ${added.length} jobs for ${n}`);
  } finally {
    await utils.release();
  }
}

/**
 * Fills `n` jobs, then runs a runner until all are done. Returns the seconds from the
 * runner's start to the moment the handler has run `n` times and the jobs table is empty.
 */
async function drainOnce(state, opts, n) {
  const { connectionString, probe } = state;
  await fill(connectionString, n);
  await probe.query("analyze graphile_worker._private_jobs");
  await probe.query("checkpoint");
  if ((await remainingJobs(probe)) !== n) throw new Error("the fill did not add every job");

  let handled = 0;
  let allHandled;
  const handledAll = new Promise((resolve) => (allHandled = resolve));
  const taskList = {
    [TASK]: () => {
      handled += 1;
      if (handled === n) allHandled();
    },
  };

  const started = process.hrtime.bigint();
  const runner = await gw.run({
    preset: { worker: workerPreset(opts, connectionString) },
    taskList,
    parsedCronItems: [], // no cron
    noHandleSignals: true, // this script handles them (and drops its database)
  });
  state.runner = runner;
  const failed = runner.promise.then(
    () => Promise.reject(new Error("the runner stopped before the drain finished")),
    (e) => Promise.reject(e),
  );
  failed.catch(() => {});
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`timed out after ${opts.timeoutS} s: ${handled} of ${n} handled`)),
      opts.timeoutS * 1000,
    );
  });
  try {
    await Promise.race([handledAll, failed, timeout]);
    // With batched completion the last jobs are deleted a moment after their handler ran.
    for (;;) {
      const left = await Promise.race([remainingJobs(probe), failed, timeout]);
      if (left === 0) break;
      await sleep(5);
    }
  } finally {
    clearTimeout(timer);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;

  const { rows } = await probe.query(
    "select count(*)::int as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
  );
  state.runner = null;
  await runner.stop();
  await runner.promise.catch(() => {});
  if (handled !== n) throw new Error(`the handler ran ${handled} times for ${n} jobs`);
  return { seconds, connections: rows[0].n };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const version = installedVersion();
  const dbName = `harel_peer_graphile_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: opts.databaseUrl });
  const state = { runner: null, probe: null, connectionString: withDatabase(opts.databaseUrl, dbName) };
  let created = false;
  let cleaning = null;

  const cleanup = () =>
    (cleaning ??= (async () => {
      if (state.runner) {
        const r = state.runner;
        state.runner = null;
        await r.stop().catch(() => {});
      }
      if (state.probe) await state.probe.end().catch(() => {});
      if (created) {
        await admin
          .query(`drop database if exists ${pg.escapeIdentifier(dbName)} with (force)`)
          .catch((e) => console.error(`# could not drop database ${dbName}: ${e.message}`));
      }
      await admin.end().catch(() => {});
    })());
  for (const signal of ["SIGINT", "SIGTERM"]) {
    process.once(signal, () => {
      console.error(`# ${signal}: stopping and dropping ${dbName}`);
      cleanup().finally(() => process.exit(130));
    });
  }

  try {
    await admin.connect();
    await admin.query(`create database ${pg.escapeIdentifier(dbName)}`);
    created = true;
    await gw.runMigrations({
      preset: { worker: { connectionString: state.connectionString, logger: quietLogger } },
    });
    state.probe = new pg.Client({ connectionString: state.connectionString });
    await state.probe.connect();

    const preset = workerPreset(opts, state.connectionString);
    const shown = { ...preset, connectionString: undefined, logger: undefined };
    console.error(
      `# graphile-worker ${version} on node ${process.version}; database ${dbName}; ` +
        `mode=${opts.mode} worker options ${JSON.stringify(shown)}` +
        ` (pollInterval and the rest at their defaults; LISTEN "jobs:insert" on one pool client)`,
    );
    if (opts.warmup > 0) {
      const w = await drainOnce(state, opts, opts.warmup);
      console.error(`# warm-up: ${opts.warmup} jobs in ${w.seconds.toFixed(3)} s (not reported)`);
    }
    const { seconds, connections } = await drainOnce(state, opts, opts.jobs);
    console.error(`# connections to the bench database at the end of the drain: ${connections} (runner pool, LISTEN client included)`);
    console.log(
      `graphile_drain jobs=${opts.jobs} concurrency=${opts.concurrency} mode=${opts.mode} ` +
        `jobs_per_s=${Math.round(opts.jobs / seconds)} seconds=${seconds.toFixed(3)} version=${version}`,
    );
  } catch (e) {
    console.error(`drain.mjs: ${e?.stack ?? e}`);
    process.exitCode = 1;
  } finally {
    await cleanup();
  }
}

await main();
