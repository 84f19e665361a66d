//! The command line's grammar: every subcommand, flag and help text (clap derive).

use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

use crate::client::GroupRank;
use crate::client::StateFilter;
use crate::vocabulary::JobId;

/// The examples under `harel-jobs --help`.
const EXAMPLES: &str = "\
Examples:
  harel-jobs stats
  harel-jobs jobs list --state running
  harel-jobs jobs show 4711
  harel-jobs jobs cancel 4711 --reason 'runaway export'
  harel-jobs groups list
  harel-jobs dead list --kind send_email
  harel-jobs dead retry --all --since 12h
  harel-jobs queues pause partner_api
  harel-jobs --json jobs list --state dead --limit 1000

The database comes from --database-url or DATABASE_URL; the password is never printed.
Exit codes: 0 success, 1 failure (including a refused or declined confirmation), 2 usage error.";

/// `harel-jobs`: look at and steer a harel-jobs queue from a shell.
#[derive(Debug, Parser)]
#[command(
    name = "harel-jobs",
    version,
    about = "Look at and steer a harel-jobs queue on PostgreSQL",
    after_help = EXAMPLES,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub(crate) struct Cli {
    // The two settings the environment may give are read from it by `database_url()` and
    // `schema()`, not by clap: clap counts a value from the environment as given on the
    // command line, and a usage error's "Usage:" line then shows `--database-url
    // <DATABASE_URL>` among the required arguments.
    /// Connection URL of the database (postgres://user:password@host:port/database)
    /// [env: DATABASE_URL].
    #[arg(long, global = true)]
    database_url: Option<String>,

    /// The queue's schema [env: HAREL_SCHEMA] [default: harel].
    #[arg(long, global = true)]
    schema: Option<String>,

    /// Print JSON (one object on stdout; see docs/guide/monitoring.md, "Command line") instead
    /// of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,

    /// How long to wait for the database to answer, e.g. 10s, 1m.
    #[arg(long, default_value = "10s", value_parser = parse_duration, global = true)]
    pub(crate) connect_timeout: Duration,

    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// `--database-url`, else `DATABASE_URL` (an empty one is none).
    pub(crate) fn database_url(&self) -> Option<String> {
        self.database_url.clone().or_else(|| {
            std::env::var("DATABASE_URL")
                .ok()
                .filter(|url| !url.is_empty())
        })
    }

    /// `--schema`, else `HAREL_SCHEMA` (if not empty), else `harel`.
    pub(crate) fn schema(&self) -> String {
        self.schema
            .clone()
            .or_else(|| {
                std::env::var("HAREL_SCHEMA")
                    .ok()
                    .filter(|schema| !schema.is_empty())
            })
            .unwrap_or_else(|| "harel".to_owned())
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the queue's schema (as the role that owns it).
    #[command(after_help = "Example:\n  harel-jobs --schema billing_jobs migrate")]
    Migrate,
    /// The queue's depth: jobs, groups, claimable groups, dead letters.
    ///
    /// Exact on a small queue; on a large one PostgreSQL's estimate (shown as ~N) or a lower
    /// bound (>=N).
    #[command(after_help = "Examples:\n  harel-jobs stats\n  harel-jobs --json stats")]
    Stats,
    /// List, show and cancel jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// List and show groups (the jobs of a group run one at a time, in order).
    #[command(subcommand)]
    Groups(GroupsCommand),
    /// List, show, retry and delete dead letters (jobs that failed for good).
    #[command(subcommand)]
    Dead(DeadCommand),
    /// List named queues, pause and resume them.
    #[command(subcommand)]
    Queues(QueuesCommand),
    /// List periodic schedules.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// List and show workflows (jobs enqueued as tasks of one DAG), cancel and retry them.
    #[command(subcommand)]
    Workflows(WorkflowsCommand),
    /// Serve the web dashboard (built with the `dashboard` feature).
    #[cfg(feature = "dashboard")]
    #[command(after_help = "\
Examples:
  harel-jobs dashboard                                  # http://127.0.0.1:8080/
  harel-jobs dashboard --listen 127.0.0.1:9000 --read-only
  HAREL_DASHBOARD_BASIC_AUTH=ops:long-passphrase harel-jobs dashboard --listen 0.0.0.0:8080 \\
      --allowed-host jobs.internal

Without --token or --basic-auth anyone who reaches the address can use it: that is your
choice to make (the default address is reachable from this machine only).")]
    Dashboard(DashboardArgs),
}

/// `dashboard` options.
#[cfg(feature = "dashboard")]
#[derive(Debug, Args)]
pub(crate) struct DashboardArgs {
    /// The address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: std::net::SocketAddr,
    /// Pages only: no cancel, retry or delete.
    #[arg(long)]
    pub(crate) read_only: bool,
    /// Require `Authorization: Bearer <TOKEN>` on every request.
    #[arg(long, env = "HAREL_DASHBOARD_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Require HTTP basic auth with USER:PASSWORD (better from the environment variable: a
    /// command line is visible to other users of the machine).
    #[arg(
        long,
        env = "HAREL_DASHBOARD_BASIC_AUTH",
        hide_env_values = true,
        conflicts_with = "token",
        value_name = "USER:PASSWORD"
    )]
    pub(crate) basic_auth: Option<String>,
    /// Answer requests for this host name too (repeatable; the environment variable takes
    /// several, comma-separated): the name people browse to, e.g. behind a proxy or on
    /// 0.0.0.0. Always answered: the --listen address, and with a loopback or unspecified
    /// one localhost, 127.0.0.1 and [::1], all with its port. Any other Host gets 421 (a
    /// web page using DNS rebinding to reach the dashboard).
    #[arg(
        long = "allowed-host",
        env = "HAREL_DASHBOARD_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_name = "HOST[:PORT]"
    )]
    pub(crate) allowed_hosts: Vec<String>,
}

/// `jobs …`
#[derive(Debug, Subcommand)]
pub(crate) enum JobsCommand {
    /// A page of jobs in id order, filtered by state, kind, group and queue.
    #[command(after_help = "\
Examples:
  harel-jobs jobs list --state running
  harel-jobs jobs list --state dead --kind send_email --limit 200
  harel-jobs jobs list --group customer-42
  harel-jobs jobs list --queue mail --state retrying
  harel-jobs jobs list --after 4711    # the next page, as the previous one says")]
    List(JobsList),
    /// One job: its state, attempts, last error and payload.
    #[command(after_help = "Example:\n  harel-jobs jobs show 4711")]
    Show {
        /// The job's id.
        id: JobId,
    },
    /// Cancel one job, or every job of a group (asks first, unless --yes).
    ///
    /// A waiting, scheduled or retrying job never runs; a running one is told at its
    /// worker's next heartbeat and ends as cancelled.
    #[command(
        group(ArgGroup::new("target").required(true).args(["id", "group"])),
        after_help = "\
Examples:
  harel-jobs jobs cancel 4711 --reason 'runaway export'
  harel-jobs jobs cancel --group customer-42 --yes"
    )]
    Cancel {
        /// The job's id.
        id: Option<JobId>,
        /// Cancel every job of this group instead.
        #[arg(long, conflicts_with = "id")]
        group: Option<String>,
        /// Why (kept with the cancelled job).
        #[arg(long)]
        reason: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Run a retrying or scheduled job now, rather than at its time.
    ///
    /// Its group's next job starts at the next claim; a job behind others of its group
    /// loses its time and keeps its place. A running, finished or otherwise waiting job is
    /// left as it is (the answer says why).
    #[command(
        name = "run-now",
        after_help = "Example:
  harel-jobs jobs run-now 4711"
    )]
    RunNow {
        /// The job's id.
        id: JobId,
    },
}

/// `jobs list` filters.
#[derive(Debug, Args)]
pub(crate) struct JobsList {
    /// Only jobs in this state.
    #[arg(long, value_enum)]
    pub(crate) state: Option<StateArg>,
    /// Only jobs of this kind.
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only jobs of this group.
    #[arg(long)]
    pub(crate) group: Option<String>,
    /// Only jobs of this queue.
    #[arg(long, value_name = "NAME")]
    pub(crate) queue: Option<String>,
    /// Start after this job id (the cursor the previous page printed).
    #[arg(long)]
    pub(crate) after: Option<JobId>,
    /// At most this many jobs (1 to 1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) limit: u32,
}

/// How `groups top` ranks the groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum RankArg {
    /// Ready groups, longest waiting first.
    Waiting,
    /// Largest first.
    Size,
}

impl From<RankArg> for GroupRank {
    fn from(rank: RankArg) -> Self {
        match rank {
            RankArg::Waiting => Self::LongestWaiting,
            RankArg::Size => Self::Largest,
        }
    }
}

/// A job state to list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum StateArg {
    /// Pending, waiting, scheduled, running or retrying.
    Queued,
    /// Waiting for the jobs it depends on.
    Pending,
    /// Due, waiting for a worker.
    Waiting,
    /// Not to start before a time.
    Scheduled,
    /// A handler runs it.
    Running,
    /// Waiting for its next attempt.
    Retrying,
    /// Done (kept only with retention).
    Completed,
    /// Failed for good.
    Dead,
    /// Cancelled.
    Cancelled,
}

impl From<StateArg> for StateFilter {
    fn from(state: StateArg) -> Self {
        match state {
            StateArg::Queued => Self::Queued,
            StateArg::Pending => Self::Pending,
            StateArg::Waiting => Self::Waiting,
            StateArg::Scheduled => Self::Scheduled,
            StateArg::Running => Self::Running,
            StateArg::Retrying => Self::Retrying,
            StateArg::Completed => Self::Completed,
            StateArg::Dead => Self::Dead,
            StateArg::Cancelled => Self::Cancelled,
        }
    }
}

/// `groups …`
#[derive(Debug, Subcommand)]
pub(crate) enum GroupsCommand {
    /// A page of the groups holding jobs, in id order.
    #[command(after_help = "\
Examples:
  harel-jobs groups list
  harel-jobs groups list --after customer-42 --limit 500")]
    List {
        /// Start after this group id (the cursor the previous page printed).
        #[arg(long)]
        after: Option<String>,
        /// At most this many groups (1 to 1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// The groups that have waited longest for a worker, or the largest (ranked by
    /// PostgreSQL's statistics of the queue; see docs/guide/steering-jobs.md).
    #[command(after_help = "\
Examples:
  harel-jobs groups top                 # the longest waiting ready groups
  harel-jobs groups top --by size       # the largest groups")]
    Top {
        /// How to rank them.
        #[arg(long, value_enum, default_value_t = RankArg::Waiting)]
        by: RankArg,
        /// At most this many groups (1 to 100).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
    },
    /// One group and its first jobs.
    #[command(after_help = "Example:\n  harel-jobs groups show customer-42")]
    Show {
        /// The group's id.
        id: String,
        /// At most this many of its jobs (1 to 1000).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
}

/// `dead …`
#[derive(Debug, Subcommand)]
pub(crate) enum DeadCommand {
    /// Dead letters, newest first.
    #[command(after_help = "\
Examples:
  harel-jobs dead list
  harel-jobs dead list --kind send_email --limit 200
  harel-jobs dead list --before 4711    # the next page, as the previous one says")]
    List {
        /// Only this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Only ids below this one (the cursor the previous page printed).
        #[arg(long)]
        before: Option<JobId>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// One dead letter, with its error and payload.
    #[command(after_help = "Example:\n  harel-jobs dead show 4711")]
    Show {
        /// Its id.
        id: JobId,
    },
    /// Put dead letters back in the queue (same group, kind, payload, priority; attempts
    /// start over). More than one asks first, unless --yes.
    #[command(
        group(ArgGroup::new("which").required(true).args(["ids", "all"])),
        after_help = "\
Examples:
  harel-jobs dead retry 4711
  harel-jobs dead retry --all --since 12h              # last night's
  harel-jobs dead retry --all --kind send_email --yes"
    )]
    Retry(DeadSelection),
    /// Delete dead letters for good. More than one asks first, unless --yes.
    #[command(
        group(ArgGroup::new("which").required(true).args(["ids", "all"])),
        after_help = "\
Examples:
  harel-jobs dead delete 4711
  harel-jobs dead delete --all --kind obsolete_job --yes"
    )]
    Delete(DeadSelection),
    /// Delete the dead letters that failed longer ago than --older-than (asks first, unless
    /// --yes).
    #[command(after_help = "Example:\n  harel-jobs dead purge --older-than 30d --yes")]
    Purge {
        /// How old: 90s, 30m, 12h, 7d or 2w.
        #[arg(long, value_parser = parse_duration)]
        older_than: Duration,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// Which dead letters `dead retry` and `dead delete` act on.
#[derive(Debug, Args)]
pub(crate) struct DeadSelection {
    /// Their ids.
    pub(crate) ids: Vec<JobId>,
    /// Every dead letter (narrowed by --kind and --since).
    #[arg(long, conflicts_with = "ids")]
    pub(crate) all: bool,
    /// With --all: only this kind.
    #[arg(long, conflicts_with = "ids")]
    pub(crate) kind: Option<String>,
    /// With --all: only those that failed within this long (90s, 30m, 12h, 7d, 2w).
    #[arg(long, conflicts_with = "ids", value_parser = parse_duration)]
    pub(crate) since: Option<Duration>,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

/// `queues …`
#[derive(Debug, Subcommand)]
pub(crate) enum QueuesCommand {
    /// Every queue: paused or not, its limits, its ready groups and running jobs.
    #[command(after_help = "Examples:\n  harel-jobs queues list\n  harel-jobs --json queues list")]
    List,
    /// Each queue's depth by priority and state, in groups (each counted by its next job).
    #[command(after_help = "Example:\n  harel-jobs queues depth")]
    Depth,
    /// Pause a queue: no worker starts its jobs until it is resumed (running jobs finish;
    /// enqueueing still works). A queue no job went to yet is refused unless --create.
    #[command(
        after_help = "Examples:\n  harel-jobs queues pause partner_api\n  harel-jobs queues pause new_partner --create"
    )]
    Pause {
        /// The queue's name.
        name: String,
        /// Create the queue if no job went to it yet (else an unknown name is refused).
        #[arg(long)]
        create: bool,
    },
    /// Resume a paused queue.
    #[command(after_help = "Example:\n  harel-jobs queues resume partner_api")]
    Resume {
        /// The queue's name.
        name: String,
    },
    /// A queue's fairness keys in key order: the keys with ready groups and the keys with a
    /// weight set, each with its weight, ready groups and running jobs, and the queue's
    /// limit per key.
    #[command(after_help = "\
Examples:
  harel-jobs queues keys default
  harel-jobs queues keys default --after tenant-41 --limit 100")]
    Keys {
        /// The queue's name.
        name: String,
        /// Start after this key (the cursor the previous page printed).
        #[arg(long)]
        after: Option<String>,
        /// At most this many keys (1 to 1000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// Set a fairness key's weight in a queue: its share of the starts against the other
    /// keys with ready work (1 to 1000; 1, the default, removes the setting).
    #[command(after_help = "Example:\n  harel-jobs queues weight default tenant-42 3")]
    Weight {
        /// The queue's name.
        name: String,
        /// The fairness key ("" for the jobs enqueued without one).
        key: String,
        /// The weight, 1 to 1000.
        #[arg(value_parser = clap::value_parser!(u32).range(1..=1000))]
        weight: u32,
        /// Create the queue if no job went to it yet (else an unknown name is refused).
        #[arg(long)]
        create: bool,
    },
    /// Limit each fairness key's jobs in a queue, over every worker: its running jobs, its
    /// starts per period, or both (--none removes both). A key at its running limit starts
    /// nothing more until one of its jobs ends; past its rate, its next jobs wait for the
    /// start times the rate gives them.
    #[command(after_help = "\
Examples:
  harel-jobs queues key-limit default 5
  harel-jobs queues key-limit default 5 --rate 20 --per 1s
  harel-jobs queues key-limit default --rate 100 --per 1m
  harel-jobs queues key-limit default --none")]
    KeyLimit {
        /// The queue's name.
        name: String,
        /// At most this many running jobs per key (1 to 1000000).
        #[arg(required_unless_present_any = ["none", "rate"], conflicts_with = "none",
              value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        running: Option<u32>,
        /// At most this many starts per key per --per (1 to 1000000).
        #[arg(long, requires = "per", conflicts_with = "none",
              value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        rate: Option<u32>,
        /// The rate's period, up to a day (1s, 30s, 1m, 1h).
        #[arg(long, requires = "rate", value_parser = parse_duration)]
        per: Option<Duration>,
        /// Create the queue if no job went to it yet (else an unknown name is refused).
        #[arg(long)]
        create: bool,
        /// Remove the limits.
        #[arg(long)]
        none: bool,
    },
}

/// `schedules …`
#[derive(Debug, Subcommand)]
pub(crate) enum SchedulesCommand {
    /// The periodic schedules workers declared, with their last and next tick and whether
    /// paused, by name.
    #[command(after_help = "\
Examples:
  harel-jobs schedules list
  harel-jobs schedules list --after nightly-report --limit 100")]
    List {
        /// Start after this schedule name (the cursor the previous page printed).
        #[arg(long)]
        after: Option<String>,
        /// At most this many schedules (1 to 1000; a schema holds at most 1000).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// Forget a schedule no worker declares any more (its last tick with it; asks first
    /// unless --yes).
    #[command(after_help = "Example:\n  harel-jobs schedules delete old-nightly-report --yes")]
    Delete {
        /// The schedule's name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Pause a schedule: no worker enqueues a tick of it until it is resumed (a trigger
    /// not yet fired is dropped). An unknown name is refused.
    #[command(after_help = "Example:\n  harel-jobs schedules pause nightly-report")]
    Pause {
        /// The schedule's name.
        name: String,
    },
    /// Resume a paused schedule: its next tick is the next one to come (the ticks that
    /// passed while paused are not caught up).
    #[command(after_help = "Example:\n  harel-jobs schedules resume nightly-report")]
    Resume {
        /// The schedule's name.
        name: String,
    },
    /// Ask a schedule to enqueue one job now, besides its ticks: the next pass of a worker
    /// that declares it (within seconds) makes and enqueues it, once. Refused for a paused
    /// schedule.
    #[command(after_help = "Example:\n  harel-jobs schedules trigger nightly-report")]
    Trigger {
        /// The schedule's name.
        name: String,
    },
}

/// `workflows …`
#[derive(Debug, Subcommand)]
pub(crate) enum WorkflowsCommand {
    /// Workflows, newest first, with how many of their tasks ended and failed.
    #[command(after_help = "\
Examples:
  harel-jobs workflows list
  harel-jobs workflows list --name nightly-export --limit 20
  harel-jobs workflows list --before 812    # the next page, as the previous one says")]
    List {
        /// Only workflows of this name.
        #[arg(long)]
        name: Option<String>,
        /// Start before this workflow id (the cursor the previous page printed).
        #[arg(long)]
        before: Option<i64>,
        /// At most this many workflows (1 to 1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// One workflow: its tasks in order, each with its job, its state and the tasks it
    /// waits for (the graph).
    #[command(after_help = "\
Examples:
  harel-jobs workflows show 812
  harel-jobs workflows show 812 --after 100    # tasks after the 100th")]
    Show {
        /// The workflow's id.
        id: i64,
        /// Start after this task (its ordinal, the cursor the previous page printed).
        #[arg(long, default_value_t = 0)]
        after: u32,
        /// At most this many tasks (1 to 1000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// Cancel every task of a workflow that has not ended (asks first, unless --yes).
    #[command(
        after_help = "Example:\n  harel-jobs workflows cancel 812 --reason 'customer left' --yes"
    )]
    Cancel {
        /// The workflow's id.
        id: i64,
        /// Why (kept with each cancelled job).
        #[arg(long)]
        reason: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Enqueue again the tasks of a workflow that became dead letters or were cancelled,
    /// each waiting for its parents as it did (asks first, unless --yes).
    #[command(after_help = "Example:\n  harel-jobs workflows retry 812 --yes")]
    Retry {
        /// The workflow's id.
        id: i64,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// The longest duration accepted: 100 years.
const MAX_DURATION_SECS: u64 = 100 * 365 * 24 * 3600;

/// Parses `90s`, `30m`, `12h`, `7d` or `2w` (a whole number and one unit).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let usage = || format!("{text:?} is not a duration: use a whole number and s, m, h, d or w");
    let unit_at = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(usage)?;
    let (number, unit) = text.split_at(unit_at);
    let number: u64 = number.parse().map_err(|_| usage())?;
    let seconds: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 24 * 3600,
        "w" => 7 * 24 * 3600,
        _ => return Err(usage()),
    };
    match number.checked_mul(seconds) {
        Some(total) if total <= MAX_DURATION_SECS => Ok(Duration::from_secs(total)),
        _ => Err(format!("{text:?} is longer than 100 years")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_take_one_number_and_one_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in [
            "",
            "7",
            "d",
            "7x",
            "1.5h",
            "-1d",
            "7 d",
            "7dd",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("5300w").unwrap_err().contains("100 years"));
    }

    #[test]
    fn selections_need_ids_or_all_and_not_both() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["harel-jobs"], args].concat());
        assert!(parse(&["dead", "retry", "1", "2"]).is_ok());
        assert!(parse(&["dead", "retry", "--all", "--since", "12h"]).is_ok());
        assert!(parse(&["dead", "retry"]).is_err());
        assert!(parse(&["dead", "retry", "1", "--all"]).is_err());
        assert!(parse(&["dead", "delete", "1", "--kind", "k"]).is_err());
        assert!(parse(&["dead", "delete", "1", "--since", "1h"]).is_err());
        assert!(parse(&["dead", "delete", "--kind", "k"]).is_err());
        assert!(parse(&["dead", "delete", "--all", "--kind", "k", "--since", "1h"]).is_ok());
        assert!(parse(&["jobs", "cancel"]).is_err());
        assert!(parse(&["jobs", "cancel", "1", "--group", "g"]).is_err());
        assert!(parse(&["jobs", "list", "--limit", "0"]).is_err());
        assert!(parse(&["jobs", "list", "--state", "sleeping"]).is_err());
        assert!(parse(&["jobs", "show", "x"]).is_err());
    }
}
