//! Worker processes (`harel-fault-worker`): start, SIGKILL, SIGTERM, SIGSTOP/SIGCONT,
//! restart, and their logs. Every incarnation has its own name; the test records in
//! `rel.exits` when and how each one ended, after reaping it.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sqlx::PgPool;

/// The worker binary Cargo built for this test target.
pub const WORKER_BIN: &str = env!("CARGO_BIN_EXE_harel-fault-worker");

/// One running (or ended) worker process.
pub struct Proc {
    pub name: String,
    pub slot: usize,
    child: Child,
    pub out: PathBuf,
    pub err: PathBuf,
    pub status: Option<ExitStatus>,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether it has exited (reaps it if so).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    pub fn stdout(&self) -> String {
        fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// The `key=value` counters of its `FAULT_WORKER_STATS` line (after a graceful stop).
    pub fn stats(&self) -> Option<BTreeMap<String, String>> {
        let text = self.stdout();
        let line = text.lines().find(|l| l.starts_with("FAULT_WORKER_STATS"))?;
        Some(
            line.split_whitespace()
                .skip(1)
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    pub fn stat(&self, name: &str) -> u64 {
        self.stats()
            .and_then(|s| s.get(name).and_then(|v| v.parse().ok()))
            .unwrap_or(0)
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child, not yet reaped
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// Waits for the process to exit, up to `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// A set of worker processes sharing a base configuration.
pub struct Fleet {
    pub procs: Vec<Proc>,
    base: Vec<(String, String)>,
    log_dir: PathBuf,
    prefix: String,
    incarnations: usize,
}

impl Fleet {
    /// A fleet whose workers get `base` as environment (plus `HAREL_FW_NAME`).
    pub fn new(log_dir: PathBuf, prefix: &str, base: &[(&str, String)]) -> Fleet {
        fs::create_dir_all(&log_dir).expect("log dir");
        Fleet {
            procs: Vec::new(),
            base: base
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            log_dir,
            prefix: prefix.to_owned(),
            incarnations: 0,
        }
    }

    /// Starts a worker in `slot` with extra environment; returns its index in `procs`.
    pub fn spawn_with(&mut self, slot: usize, extra: &[(&str, String)]) -> usize {
        self.incarnations += 1;
        let name = format!("{}{}-{}", self.prefix, slot, self.incarnations);
        let out = self.log_dir.join(format!("{name}.out"));
        let err = self.log_dir.join(format!("{name}.err"));
        let mut command = Command::new(WORKER_BIN);
        command
            .env_remove("RUST_LOG")
            .env("RUST_LOG", "warn")
            .env("HAREL_FW_NAME", &name)
            .stdin(Stdio::null())
            .stdout(File::create(&out).expect("stdout file"))
            .stderr(File::create(&err).expect("stderr file"));
        for (key, value) in &self.base {
            command.env(key, value);
        }
        for (key, value) in extra {
            command.env(key, value);
        }
        let child = command.spawn().expect("start harel-fault-worker");
        self.procs.push(Proc {
            name,
            slot,
            child,
            out,
            err,
            status: None,
        });
        self.procs.len() - 1
    }

    pub fn spawn(&mut self, slot: usize) -> usize {
        self.spawn_with(slot, &[])
    }

    /// The running processes' indexes.
    pub fn running(&mut self) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&i| self.procs[i].exited().is_none())
            .collect()
    }

    /// SIGKILL, reap, record the exit.
    pub async fn kill(&mut self, index: usize, ledger: &PgPool) {
        let proc = &mut self.procs[index];
        proc.signal(libc::SIGKILL);
        proc.wait_exit(Duration::from_secs(30))
            .expect("a SIGKILLed worker exits");
        record_exit(ledger, &proc.name, "kill").await;
    }

    /// SIGTERM (graceful shutdown), wait up to `limit` for the exit, record it.
    pub async fn terminate(
        &mut self,
        index: usize,
        limit: Duration,
        ledger: &PgPool,
    ) -> ExitStatus {
        let proc = &mut self.procs[index];
        proc.signal(libc::SIGTERM);
        let status = proc
            .wait_exit(limit)
            .unwrap_or_else(|| panic!("{} did not stop within {limit:?} of SIGTERM", proc.name));
        record_exit(ledger, &proc.name, "term").await;
        status
    }

    /// SIGTERM to every running worker at once, then wait for all.
    pub async fn terminate_all(&mut self, limit: Duration, ledger: &PgPool) -> Vec<ExitStatus> {
        let running = self.running();
        for &i in &running {
            self.procs[i].signal(libc::SIGTERM);
        }
        let mut statuses = Vec::new();
        for i in running {
            let proc = &mut self.procs[i];
            let status = proc.wait_exit(limit).unwrap_or_else(|| {
                panic!("{} did not stop within {limit:?} of SIGTERM", proc.name)
            });
            record_exit(ledger, &proc.name, "term").await;
            statuses.push(status);
        }
        statuses
    }

    pub fn stop_signal(&self, index: usize) {
        self.procs[index].signal(libc::SIGSTOP);
    }

    pub fn cont_signal(&self, index: usize) {
        self.procs[index].signal(libc::SIGCONT);
    }

    /// Every stderr of the fleet, concatenated (for log checks and failure reports).
    pub fn all_stderr(&self) -> String {
        self.procs
            .iter()
            .map(|p| format!("----- {} -----\n{}", p.name, p.stderr()))
            .collect()
    }

    /// The processes that exited with an unexpected status (not 0, not our SIGKILL).
    pub fn crashed(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for proc in &mut self.procs {
            if let Some(status) = proc.exited() {
                use std::os::unix::process::ExitStatusExt;
                if !status.success() && status.signal() != Some(libc::SIGKILL) {
                    out.push(format!("{}: {status}", proc.name));
                }
            }
        }
        out
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for proc in &mut self.procs {
            if proc.exited().is_none() {
                // a stopped process must be continued to die of SIGKILL promptly
                proc.signal(libc::SIGCONT);
                proc.signal(libc::SIGKILL);
                let _ = proc.child.wait();
            }
        }
    }
}

/// Records that a worker incarnation ended, with the time it was reaped (this machine's
/// clock, which is also the database's: the server runs here).
pub async fn record_exit(ledger: &PgPool, name: &str, how: &str) {
    let reaped = chrono::Utc::now();
    for _ in 0..600 {
        let done = sqlx::query(
            "INSERT INTO rel.exits (worker, how, exited_at) VALUES ($1, $2, $3)
             ON CONFLICT (worker) DO NOTHING",
        )
        .bind(name)
        .bind(how)
        .bind(reaped)
        .execute(ledger)
        .await;
        if done.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not record the exit of {name}");
}
