//! A private PostgreSQL cluster in a temporary directory: initdb, start, stop, kill,
//! restart, without touching the machine's own server. The reliability suite
//! (tests/reliability) runs its scenarios on one each; other tests start one when they need
//! a server setting the machine's server may not have (`autovacuum = off`, for instance).
//!
//! PostgreSQL refuses to run as root, so when the suite runs as root (CI does) every server
//! command runs as the `postgres` OS user (`runuser -u postgres --`) in a directory that
//! user owns. Dropping the [`Cluster`] stops the server (immediate mode), kills anything
//! left and removes the directory, also when the test panics.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// Settings of a private cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The server's `max_connections`.
    pub max_connections: u32,
    /// Extra `pg_hba.conf` lines, placed before the trust lines.
    pub hba_first: Vec<String>,
    /// Extra `postgresql.conf` lines (`"autovacuum = off"`), after the suite's own, so they
    /// win.
    pub settings: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            max_connections: 150,
            hba_first: Vec::new(),
            settings: Vec::new(),
        }
    }
}

/// A running (or stopped) private cluster.
pub struct Cluster {
    dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
    bin: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    as_postgres: bool,
}

/// The newest PostgreSQL under /usr/lib/postgresql, or `HAREL_PG_BIN`, or `pg_config`'s.
fn pg_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("HAREL_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<u32> = fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    versions.sort_unstable();
    if let Some(version) = versions.last() {
        let dir = PathBuf::from(format!("/usr/lib/postgresql/{version}/bin"));
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let out = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("no PostgreSQL found: install postgresql (initdb, pg_ctl) or set HAREL_PG_BIN");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions
    unsafe { libc::geteuid() == 0 }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}

fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id postgres");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the postgres OS user must exist when running as root")
    };
    (id("-u"), id("-g"))
}

/// Whether `pid` is a live (not zombie) process.
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // the state follows the parenthesised command name
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !matches!(
                state.and_then(|s| s.chars().next()),
                Some('Z') | Some('X') | None
            )
        }
        Err(_) => false,
    }
}

/// The children of `pid`, from /proc.
fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if let Ok(stat) = fs::read_to_string(format!("/proc/{child}/stat")) {
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|p| p.parse::<i32>().ok());
                if ppid == Some(pid) {
                    out.push(child);
                }
            }
        }
    }
    out
}

static CLUSTERS: AtomicU32 = AtomicU32::new(0);

impl Cluster {
    /// A new, empty directory for a cluster (owned by the `postgres` OS user when root), and
    /// a free port; nothing started.
    fn prepare() -> Cluster {
        let bin = pg_bin();
        let as_postgres = is_root();
        let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "harel-cluster-{}-{n}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        fs::create_dir_all(&dir).expect("create the cluster directory");
        let cluster = Cluster {
            data: dir.join("data"),
            log: dir.join("server.log"),
            dir,
            bin,
            port: free_port(),
            as_postgres,
        };
        if as_postgres {
            let (uid, gid) = postgres_ids();
            std::os::unix::fs::chown(&cluster.dir, Some(uid), Some(gid)).expect("chown");
        }
        cluster
    }

    /// The settings that make a cluster this one (its port and socket directory), appended
    /// to `postgresql.conf`: later lines win, so a standby's copy of its primary's file is
    /// overridden too.
    fn own_settings(&self) -> String {
        format!(
            "\n# harel-jobs test cluster: this one\nport = {port}\n\
             unix_socket_directories = '{dir}'\n",
            port = self.port,
            dir = self.dir.display(),
        )
    }

    /// initdb and start a new cluster.
    pub fn start(options: ClusterOptions) -> Cluster {
        let cluster = Cluster::prepare();
        cluster.run(
            "initdb",
            &[
                "-D",
                cluster.data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-instructions",
            ],
        );
        let conf = format!(
            "\n# harel-jobs test cluster\nlisten_addresses = '127.0.0.1'\n\
             max_connections = {max}\n\
             superuser_reserved_connections = 3\nshared_buffers = 128MB\n\
             fsync = on\nsynchronous_commit = on\nlog_min_messages = warning\n\
             log_line_prefix = '%m [%p] %u '\n\
             wal_level = replica\nmax_wal_senders = 4\nmax_replication_slots = 4\n{own}",
            max = options.max_connections,
            own = cluster.own_settings(),
        );
        append(&cluster.data.join("postgresql.conf"), &conf);
        for setting in &options.settings {
            append(
                &cluster.data.join("postgresql.conf"),
                &format!("{setting}\n"),
            );
        }
        if !options.hba_first.is_empty() {
            let hba = cluster.data.join("pg_hba.conf");
            let old = fs::read_to_string(&hba).expect("read pg_hba.conf");
            let new = format!("{}\n{old}", options.hba_first.join("\n"));
            fs::write(&hba, new).expect("write pg_hba.conf");
        }
        cluster.start_server();
        cluster
    }

    /// A streaming standby of a running primary: `pg_basebackup -R` (with a replication
    /// slot, `slot`) over the replication connection at `127.0.0.1:via_port` (the primary's
    /// port, or a proxy in front of it), then started. The standby streams through that same
    /// address (`primary_conninfo`, written by `-R`). Every cluster of the suite can be a
    /// primary: `wal_level = replica` and WAL senders (see [`start`](Self::start)), and
    /// initdb's `pg_hba.conf` trusts local replication connections.
    pub fn standby(via_port: u16, slot: &str) -> Cluster {
        let cluster = Cluster::prepare();
        let port = via_port.to_string();
        cluster.run(
            "pg_basebackup",
            &[
                "-D",
                cluster.data.to_str().unwrap(),
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-X",
                "stream",
                "--checkpoint=fast",
                "-R",
                "-C",
                "-S",
                slot,
            ],
        );
        // the copy holds the primary's settings: override its port and socket directory
        append(
            &cluster.data.join("postgresql.conf"),
            &cluster.own_settings(),
        );
        cluster.start_server();
        cluster
    }

    /// `pg_ctl promote`, waiting until the standby accepts writes.
    pub fn promote(&self) {
        self.run(
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-w",
                "-t",
                "120",
                "promote",
            ],
        );
    }

    fn command(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        command.current_dir(&self.dir);
        command
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = self
            .command(tool)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    }

    /// `pg_ctl start`, waiting until the server accepts connections (crash recovery
    /// included).
    pub fn start_server(&self) {
        self.run(
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-l",
                self.log.to_str().unwrap(),
                "-w",
                "-t",
                "120",
                "start",
            ],
        );
    }

    /// `pg_ctl stop -m fast`: a clean shutdown that disconnects every client.
    pub fn stop_fast(&self) {
        self.run(
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-m",
                "fast",
                "-w",
                "-t",
                "120",
                "stop",
            ],
        );
    }

    /// The postmaster's pid, from postmaster.pid.
    pub fn postmaster_pid(&self) -> Option<i32> {
        let text = fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// SIGKILL to the postmaster and to every server process: a crash, as when the machine
    /// or container dies. The next start runs crash recovery.
    pub fn kill(&self) {
        let pid = self.postmaster_pid().expect("postmaster.pid");
        let children = children_of(pid);
        // SAFETY: plain kill(2) calls on pids we read from the server's own files
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            for child in &children {
                libc::kill(*child, libc::SIGKILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while (alive(pid) || children.iter().any(|c| alive(*c))) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(pid), "postmaster survived SIGKILL");
        // a zombie postmaster would still own its pid: the new postmaster would think the
        // old one is alive (kill(pid, 0) succeeds on zombies)
        if Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_file(self.data.join("postmaster.pid"));
        }
    }

    /// The URL for `user` (no password).
    pub fn url(&self, user: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL for `user` with `password`.
    pub fn url_with_password(&self, user: &str, password: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// A superuser pool on the cluster (the test's own connections).
    pub async fn admin_pool(&self, connections: u32) -> PgPool {
        let options: PgConnectOptions = self.url("postgres").parse().unwrap();
        PgPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(Duration::from_secs(120))
            .connect_with(options)
            .await
            .expect("connect to the private cluster")
    }

    /// The server log so far.
    pub fn server_log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Reloads the configuration (after editing pg_hba.conf).
    pub fn reload(&self) {
        self.run("pg_ctl", &["-D", self.data.to_str().unwrap(), "reload"]);
    }

    /// The directory of the cluster (logs of the worker processes go there too).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open for append");
    file.write_all(text.as_bytes()).expect("append");
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let pid = self.postmaster_pid();
        let _ = self
            .command("pg_ctl")
            .args([
                "-D",
                self.data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Some(pid) = pid.filter(|pid| alive(*pid)) {
            let children = children_of(pid);
            // SAFETY: as in `kill`
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                for child in children {
                    libc::kill(child, libc::SIGKILL);
                }
            }
        }
        if std::env::var_os("HAREL_RELIABILITY_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("kept the cluster directory {}", self.dir.display());
        }
    }
}
