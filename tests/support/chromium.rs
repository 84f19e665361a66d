//! Debian's headless Chromium behind its chromedriver, for the dashboard's browser tests
//! (`tests/dashboard.rs`). When the packages are missing they are installed from Debian
//! (`apt-get`, as root or through `sudo -n`); no browser is ever downloaded from elsewhere.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where Debian puts the driver and the browser.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Debian's Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";

static INSTALL: Mutex<()> = Mutex::new(());

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Installs Debian's `chromium` and `chromium-driver` if either is missing.
///
/// # Panics
/// If they are missing and cannot be installed.
pub fn ensure_installed() {
    let _installing = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if Path::new(CHROMEDRIVER).is_file() && Path::new(CHROMIUM).is_file() {
        return;
    }
    eprintln!("chromium or chromedriver missing: installing Debian's chromium and chromium-driver");
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
    let packages = ["install", "-y", "-q", "chromium", "chromium-driver"];
    let installed = apt(&packages) || (apt(&["update", "-q"]) && apt(&packages));
    assert!(
        installed && Path::new(CHROMEDRIVER).is_file() && Path::new(CHROMIUM).is_file(),
        "the dashboard's browser tests need Debian's chromium and chromium-driver and could not \
         install them (run `sudo apt-get install chromium chromium-driver`, or run the tests as \
         root or with passwordless sudo)"
    );
}

/// A chromedriver process on a free local port, killed with the value.
pub struct ChromeDriver {
    child: Child,
    /// Its WebDriver URL (`http://127.0.0.1:<port>`).
    pub url: String,
}

impl ChromeDriver {
    /// Installs Chromium if needed, starts chromedriver and waits until it accepts
    /// connections (at most 30 s).
    pub fn start() -> Self {
        ensure_installed();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromedriver did not listen on port {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }

    /// The capabilities of a headless Chromium session with a 1280×900 window.
    pub fn capabilities() -> serde_json::Map<String, serde_json::Value> {
        let value = serde_json::json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900"],
            },
        });
        match value {
            serde_json::Value::Object(map) => map,
            _ => unreachable!("a JSON object"),
        }
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the browser tests save their screenshots: `target/tmp/dashboard-screenshots/`.
pub fn screenshot_dir(target_tmp: &str) -> PathBuf {
    let dir = PathBuf::from(target_tmp).join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).expect("create the screenshot folder");
    dir
}
