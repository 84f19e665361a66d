//! A real PgBouncer in transaction pooling mode, in front of the test server, for the tests
//! of `tests/pgbouncer.rs`.
//!
//! [`PgBouncer::start`] writes an ini file into a temporary directory of its own (trust
//! auth, `pool_mode = transaction`, a free port on 127.0.0.1), starts Debian's `pgbouncer`
//! on it and kills it when the value is dropped. If `pgbouncer` is not installed, it
//! installs Debian's package (`apt-get`, as root or through `sudo -n`), or panics saying
//! how to install it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::postgres::PgConnectOptions;

use crate::{database_url, unique_name};

/// Where Debian installs the binary, then the `PATH`.
const CANDIDATES: &[&str] = &["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"];

/// Serialises the installation between tests running in parallel.
static INSTALL: Mutex<()> = Mutex::new(());

/// One PgBouncer process, killed (and its directory removed) on drop.
pub struct PgBouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
    /// The server behind it, as the tests reach it directly.
    server: PgConnectOptions,
}

impl PgBouncer {
    /// Starts a PgBouncer in transaction pooling mode in front of `DATABASE_URL`'s server,
    /// with a server pool of `pool_size` connections per database and user.
    pub fn start(pool_size: u32) -> Self {
        Self::start_for(&database_url(), pool_size)
    }

    /// [`PgBouncer::start`] in front of the server of `url` (a private
    /// [`crate::cluster::Cluster`], for instance), for `url`'s user.
    pub fn start_for(url: &str, pool_size: u32) -> Self {
        let binary = binary();
        let server: PgConnectOptions = url.parse().expect("a postgres url");
        let dir = std::env::temp_dir().join(unique_name("harel_pgbouncer"));
        std::fs::create_dir_all(&dir).expect("create pgbouncer's directory");
        let port = free_port();
        let user = server.get_username().to_owned();
        let userlist = dir.join("userlist.txt");
        write(&userlist, &format!("\"{user}\" \"\"\n"));
        let ini = dir.join("pgbouncer.ini");
        write(
            &ini,
            &format!(
                "[databases]\n\
                 * = host={host} port={server_port}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {userlist}\n\
                 pool_mode = transaction\n\
                 default_pool_size = {pool_size}\n\
                 max_client_conn = 1000\n\
                 server_lifetime = 3600\n\
                 ignore_startup_parameters = extra_float_digits\n",
                host = server.get_host(),
                server_port = server.get_port(),
                userlist = userlist.display(),
            ),
        );
        // world-readable: as root, pgbouncer runs as `postgres` (it refuses to run as root)
        let _ = Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&dir)
            .status();
        let mut command = Command::new(&binary);
        if is_root() {
            command.args(["-u", "postgres"]);
        }
        let log = std::fs::File::create(dir.join("pgbouncer.log")).expect("pgbouncer's log");
        let child = command
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", binary.display()));
        let mut bouncer = Self {
            child,
            port,
            dir,
            server,
        };
        bouncer.wait_until_listening();
        bouncer
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connect options for the test database through PgBouncer.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.server.clone().host("127.0.0.1").port(self.port)
    }

    /// The same as a URL (no password: trust auth).
    pub fn url(&self) -> String {
        let options = &self.server;
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            options.get_username(),
            self.port,
            options.get_database().unwrap_or(options.get_username())
        )
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    fn wait_until_listening(&mut self) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("pgbouncer exited at start ({status}):\n{}", self.log());
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("pgbouncer did not listen within 15 s:\n{}", self.log());
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

fn find() -> Option<PathBuf> {
    CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .or_else(|| {
            let output = Command::new("sh")
                .args(["-c", "command -v pgbouncer"])
                .output()
                .ok()?;
            let path = String::from_utf8(output.stdout).ok()?;
            let path = PathBuf::from(path.trim());
            path.is_file().then_some(path)
        })
}

/// The `pgbouncer` binary, installed from Debian's packages first if missing.
fn binary() -> PathBuf {
    let _installing = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = find() {
        return path;
    }
    eprintln!("pgbouncer is not installed: installing Debian's pgbouncer package");
    let apt = |args: &[&str]| {
        let mut command = if is_root() {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        command
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(args)
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    let installed = apt(&["install", "-y", "-q", "pgbouncer"])
        || (apt(&["update", "-q"]) && apt(&["install", "-y", "-q", "pgbouncer"]));
    match find() {
        Some(path) if installed => path,
        _ => panic!(
            "the PgBouncer tests need Debian's pgbouncer and could not install it \
             (run `sudo apt-get install pgbouncer`, or run the tests as root or with \
             passwordless sudo)"
        ),
    }
}
