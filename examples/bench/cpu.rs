//! CPU time from /proc, in clock ticks: of a process, of its waited-for children, and of
//! the whole machine (to tell the server's share from the clients' on one host), and the
//! split of a piece of work's CPU time between this process and the PostgreSQL server
//! ([`with_cpu`]).

use std::future::Future;
use std::time::Instant;

use crate::Res;

/// The counters of the machine's `cpu` line in /proc/stat (user, nice, system, idle,
/// iowait, irq, softirq, steal, …), in clock ticks since boot; empty if unreadable.
pub fn machine_counters() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// (busy, total) clock ticks of the whole machine, from /proc/stat.
pub fn machine_ticks() -> (u64, u64) {
    let values = machine_counters();
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The fields of /proc/`pid`/stat from the third on (the command may hold spaces: they
/// follow its closing parenthesis), so field n of proc(5) is at index n - 3.
fn stat_fields(pid: &str) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    // the state (field 3) is a letter: parsed as 0
    Some(
        rest.split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect(),
    )
}

/// utime+stime (fields 14 and 15) of a process in clock ticks.
pub fn proc_ticks(pid: u32) -> Option<u64> {
    let fields = stat_fields(&pid.to_string())?;
    Some(fields.get(11)? + fields.get(12)?)
}

/// cutime+cstime (fields 16 and 17) of this process: the CPU time of its children that
/// have been waited for.
pub fn children_ticks() -> u64 {
    stat_fields("self")
        .and_then(|fields| Some(fields.get(13)? + fields.get(14)?))
        .unwrap_or(0)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 if that fails).
pub fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU time of the PostgreSQL server on this machine, in clock ticks: utime+stime of every
/// `postgres` process, plus cutime+cstime (the postmaster's holds the backends that have
/// exited, such as a worker pool's own connections closed at its end). 0 when the server
/// runs elsewhere.
fn server_ticks() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.parse::<u32>().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{name}/comm")).ok()?;
            (comm.trim() == "postgres").then_some(())?;
            let fields = stat_fields(&name)?;
            Some(fields.get(11)? + fields.get(12)? + fields.get(13)? + fields.get(14)?)
        })
        .sum()
}

/// CPU time (s) of this process, of the PostgreSQL server, and of the machine (busy,
/// total), around a piece of work.
pub struct CpuSplit {
    /// Wall-clock seconds.
    pub wall: f64,
    /// CPU seconds of this process.
    pub bench: f64,
    /// CPU seconds of the PostgreSQL server's processes (every database: the bench's is
    /// the only busy one).
    pub server: f64,
    /// Busy CPU seconds of the whole machine.
    pub machine_busy: f64,
    /// CPU seconds of the whole machine, busy or not.
    pub machine_total: f64,
}

/// Runs `work` and measures its [`CpuSplit`].
pub async fn with_cpu<T>(work: impl Future<Output = Res<T>>) -> Res<(T, CpuSplit)> {
    let server_before = server_ticks();
    let self_before = proc_ticks(std::process::id()).unwrap_or(0);
    let machine_before = machine_ticks();
    let started = Instant::now();
    let value = work.await?;
    let wall = started.elapsed().as_secs_f64();
    let self_after = proc_ticks(std::process::id()).unwrap_or(0);
    let machine_after = machine_ticks();
    let server_after = server_ticks();
    let hz = clock_ticks_per_second();
    let server = server_after.saturating_sub(server_before);
    Ok((
        value,
        CpuSplit {
            wall,
            bench: (self_after - self_before) as f64 / hz,
            server: server as f64 / hz,
            machine_busy: (machine_after.0 - machine_before.0) as f64 / hz,
            machine_total: (machine_after.1 - machine_before.1) as f64 / hz,
        },
    ))
}

/// Prints `cpu` as two `# profile` lines: totals, and per one of `units`.
pub fn print_cpu(label: &str, units: u64, unit: &str, cpu: &CpuSplit) {
    println!(
        "# profile {label} cpu: wall_s={:.2} bench_process_s={:.2} ({:.0}% of one core) server_s={:.2} ({:.0}% of one core) machine_busy={:.0}% of all cores",
        cpu.wall,
        cpu.bench,
        100.0 * cpu.bench / cpu.wall,
        cpu.server,
        100.0 * cpu.server / cpu.wall,
        100.0 * cpu.machine_busy / cpu.machine_total.max(0.001)
    );
    println!(
        "# profile {label} cpu per {unit}: bench_process_us={:.1} server_us={:.1} machine_busy_us={:.1}",
        1e6 * cpu.bench / units as f64,
        1e6 * cpu.server / units as f64,
        1e6 * cpu.machine_busy / units as f64
    );
}
