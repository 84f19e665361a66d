//! CPU time from /proc, in clock ticks: of a process, of its waited-for children, and of
//! the whole machine (to tell the server's share from the clients' on one host).

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
