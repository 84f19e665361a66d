//! A defined noisy neighbour: what a database server's machine often has beside the queue.
//!
//! [`Noise::start`] starts, as child processes of the bench, one CPU-bound loop per core at
//! the lowest priority (`nice -n 19 sh -c 'while :; do :; done'`) and one writer that writes
//! 64 MiB with `oflag=dsync` in a loop (`dd`, into a file under the system's temporary
//! directory). Every child runs under `timeout`, so that none outlives the bench by more
//! than the bound, and each gets SIGTERM when the bench dies (`PR_SET_PDEATHSIG`, which
//! `timeout` passes on to its command); dropping the value stops them at once.
//!
//! Each child runs in a session of its own (`setsid`), as a neighbour does: another service,
//! a backup, a compile in another terminal. With `HAREL_BENCH_NOISE_SESSION=shared` they stay
//! in the bench's session instead. That matters on Linux with `kernel.sched_autogroup_enabled`
//! (the default of desktop and many server kernels) and with cgroups: CPU is shared fairly
//! between sessions (cgroups), and a nice value ranks a task only against the others of its
//! own session, so loops in the bench's session take the bench's share, and more: see
//! BENCHMARKS.md, "Noisy neighbour".

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::Res;

/// Which halves of the noise to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The CPU loops and the fsync writer.
    Both,
    /// One `nice 19` CPU loop per core only.
    Cpu,
    /// The fsync writer only.
    Disk,
}

impl Kind {
    /// The figure suffix of this noise.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Both => "noisy",
            Kind::Cpu => "cpu_noise",
            Kind::Disk => "disk_noise",
        }
    }
}

/// The running noise; stopped when dropped.
pub struct Noise {
    children: Vec<Child>,
    file: std::path::PathBuf,
}

impl Noise {
    /// Starts `kind` of noise, for at most `bound`.
    pub fn start(kind: Kind, bound: Duration) -> Res<Self> {
        let bound = bound.as_secs().max(1).to_string();
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let file = std::env::temp_dir().join(format!("harel-bench-noise-{}", std::process::id()));
        let own_sessions = Self::own_sessions();
        // built first: an early return drops it, stopping the children already started
        let mut noise = Self {
            children: Vec::new(),
            file,
        };
        if kind != Kind::Disk {
            for _ in 0..cores {
                let script = "exec nice -n 19 sh -c 'while :; do :; done'";
                noise.children.push(spawn(&bound, script, own_sessions)?);
            }
        }
        if kind != Kind::Cpu {
            let script = format!(
                "while :; do dd if=/dev/zero of='{}' bs=1M count=64 oflag=dsync 2>/dev/null; done",
                noise.file.display()
            );
            noise.children.push(spawn(&bound, &script, own_sessions)?);
        }
        // let the loops reach their steady state before anything is timed
        std::thread::sleep(Duration::from_millis(500));
        Ok(noise)
    }

    /// Whether the noise runs in sessions of its own (the default), not the bench's
    /// (`HAREL_BENCH_NOISE_SESSION=shared`).
    pub fn own_sessions() -> bool {
        std::env::var("HAREL_BENCH_NOISE_SESSION").as_deref() != Ok("shared")
    }

    /// A `# noise:` context line: what runs beside the measured run.
    pub fn describe(kind: Kind) -> String {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let what = match kind {
            Kind::Both => {
                format!("{cores} × `nice -n 19` CPU loop + a `dd bs=1M count=64 oflag=dsync` loop")
            }
            Kind::Cpu => format!("{cores} × `nice -n 19` CPU loop"),
            Kind::Disk => "a `dd bs=1M count=64 oflag=dsync` loop".to_owned(),
        };
        if Self::own_sessions() {
            format!("{what}, each in a session of its own")
        } else {
            format!("{what}, in the bench's session (HAREL_BENCH_NOISE_SESSION=shared)")
        }
    }
}

impl Drop for Noise {
    fn drop(&mut self) {
        for child in &mut self.children {
            // each child leads a process group of its own (and, unless shared, a session):
            // the loop and its `dd` go together
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", child.id())])
                .status();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Starts `sh -c script` under `timeout bound`, silent and set apart (see [`Apart`]).
fn spawn(bound: &str, script: &str, own_session: bool) -> std::io::Result<Child> {
    Command::new("timeout")
        .args([bound, "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .apart(own_session)
        .spawn()
}

/// Sets a child apart: the leader of a process group of its own (with `own_session`, of a
/// session of its own), stopped when the bench dies, however it dies (a killed bench runs no
/// `Drop`).
trait Apart {
    fn apart(&mut self, own_session: bool) -> &mut Self;
}

impl Apart for Command {
    fn apart(&mut self, own_session: bool) -> &mut Self {
        if !own_session {
            self.process_group(0);
        }
        // SAFETY: setsid and prctl are async-signal-safe, and the closure touches nothing else
        unsafe {
            self.pre_exec(move || {
                // a new session is a new process group too
                if own_session && libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            })
        }
    }
}
