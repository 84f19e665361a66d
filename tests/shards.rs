//! `Shards` against a real PostgreSQL: one logical queue over several schemas of one
//! database, and over several databases; every job runs once, each group's jobs in one
//! shard (the one its route names) and in order; the transactional enqueue into a shard;
//! the route pinned and consistent; the sets refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::{
    Count, EnqueueOptions, Job, JobContext, JobResult, MAX_SHARDS, Schema, Shard, ShardedJobId,
    Shards, ShardsError, Unique, WorkerHandle, job,
};
use harel_jobs_suite::{SuiteSchema, TestDatabase, database_url, pool_with};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

/// What one worker pool saw: its shard, and each run (shared by the pools of a test).
#[derive(Clone)]
struct Seen {
    shard: usize,
    runs: Arc<Mutex<Vec<Run>>>,
}

/// One job run: the shard whose pool ran it, its group (as the worker saw it) and its
/// number within the group.
#[derive(Clone, Debug)]
struct Run {
    shard: usize,
    group: String,
    n: u32,
}

impl Seen {
    fn record<S>(&self, ctx: &JobContext<S>, n: u32) {
        let run = Run {
            shard: self.shard,
            group: ctx.group().to_owned(),
            n,
        };
        self.runs.lock().unwrap().push(run);
    }
}

/// A job of a group: the `n`-th of its group.
#[job]
async fn grouped(ctx: JobContext<Seen>, #[group] group: String, n: u32) -> JobResult {
    let _ = group;
    ctx.state().record(&ctx, n);
    Ok(())
}

/// A job without a group (unless an enqueue gives it one).
#[job]
async fn loose(ctx: JobContext<Seen>, n: u32) -> JobResult {
    ctx.state().record(&ctx, n);
    Ok(())
}

const GROUPS: usize = 30;
const PER_GROUP: u32 = 6;
const LOOSE: u32 = 12;
/// The group given to `SHARED` loose jobs by their enqueue's options.
const SHARED_GROUP: &str = "loose-shared";
const SHARED: u32 = 5;

fn group_name(g: usize) -> String {
    format!("account-{g}")
}

/// The id of group `g` as stored (`#[group]` prefixes the kind), which the route hashes.
fn group_id(g: usize) -> String {
    let job = Grouped {
        group: group_name(g),
        n: 0,
    };
    let id = job.group().expect("#[group]");
    assert_eq!(id, format!("grouped:account-{g}"));
    id
}

/// A worker pool on each shard, recording its runs in `runs`.
fn start_workers(shards: &Shards, runs: &Arc<Mutex<Vec<Run>>>) -> Vec<WorkerHandle> {
    shards
        .iter()
        .map(|shard| {
            let seen = Seen {
                shard: shard.index(),
                runs: Arc::clone(runs),
            };
            shard
                .worker(seen)
                .register::<Grouped>()
                .register::<Loose>()
                .concurrency(4)
                .poll_interval(Duration::from_millis(50))
                .build()
                .unwrap()
                .start()
        })
        .collect()
}

/// Each shard's job count, read exactly (small tables are counted, not estimated).
async fn jobs_per_shard(shards: &Shards) -> Vec<i64> {
    let mut counts = Vec::new();
    for client in shards.clients() {
        let jobs = client.stats().await.unwrap().jobs;
        assert!(jobs.is_exact(), "{jobs}");
        counts.push(jobs.value());
    }
    counts
}

/// Enqueues `GROUPS` groups of `PER_GROUP` jobs (the first half one by one through
/// `Shards::enqueue`, the rest in a `ShardedBatch`; the groups interleaved), `SHARED` jobs
/// into a group given by `Shards::enqueue_with`'s options, and `LOOSE` jobs without a
/// group; checks each landed in its route's shard (counted in each schema), runs one worker
/// pool per shard, and checks that every job ran once, each group in its shard and in
/// order, the loose ones spread evenly.
async fn enqueue_run_and_check(shards: &Shards) {
    let route = |g: usize| shards.shard_of_group(&group_id(g)).index();
    let mut expected = vec![0_i64; shards.len()];
    for n in 0..PER_GROUP / 2 {
        for g in 0..GROUPS {
            let id: ShardedJobId = shards
                .enqueue(Grouped {
                    group: group_name(g),
                    n,
                })
                .await
                .unwrap();
            assert_eq!(id.shard, route(g), "the enqueue names its shard");
            expected[route(g)] += 1;
        }
    }
    let shared = shards.shard_of_group(SHARED_GROUP).index();
    let options = EnqueueOptions::new().group(SHARED_GROUP);
    for n in 0..SHARED {
        let id = shards.enqueue_with(Loose { n }, &options).await.unwrap();
        assert_eq!(id.shard, shared, "routed by the options' group");
        expected[shared] += 1;
    }
    let mut batch = shards.batch();
    for n in PER_GROUP / 2..PER_GROUP {
        for g in 0..GROUPS {
            batch
                .push(Grouped {
                    group: group_name(g),
                    n,
                })
                .unwrap();
            expected[route(g)] += 1;
        }
    }
    for n in 0..LOOSE {
        batch.push(Loose { n }).unwrap();
    }
    let ids = batch.enqueue().await.unwrap();
    assert_eq!(
        ids.len(),
        GROUPS * (PER_GROUP / 2) as usize + LOOSE as usize
    );
    for (g, id) in ids.iter().take(GROUPS).enumerate() {
        assert_eq!(id.shard, route(g), "batch ids name their shards");
    }
    // round-robin: the loose jobs are spread evenly
    let per_shard = i64::from(LOOSE) / shards.len() as i64;
    for count in &mut expected {
        *count += per_shard;
    }
    assert_eq!(
        jobs_per_shard(shards).await,
        expected,
        "each job in its route's shard"
    );
    let queued = shards.stats().await.unwrap();
    let total_queued = expected.iter().sum();
    assert_eq!(
        queued.jobs,
        Count::Exact(total_queued),
        "summed over the shards"
    );
    assert!(!queued.is_idle());
    let used: BTreeSet<usize> = (0..GROUPS).map(route).collect();
    assert_eq!(used.len(), shards.len(), "the groups use every shard");

    let runs = Arc::new(Mutex::new(Vec::new()));
    let handles = start_workers(shards, &runs);
    let total = GROUPS * PER_GROUP as usize + (SHARED + LOOSE) as usize;
    let started = Instant::now();
    while runs.lock().unwrap().len() < total {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} of {total} jobs ran within 60 s",
            runs.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for handle in handles {
        handle.shutdown().await.unwrap();
    }
    let stats = shards.stats().await.unwrap();
    assert!(stats.is_idle(), "{stats:?}");
    assert_eq!(stats.jobs, Count::Exact(0));

    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), total, "every job ran exactly once");
    // each group's runs, in the order they ran
    let mut by_group: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for run in &runs {
        by_group.entry(&run.group).or_default().push(run);
    }
    let in_order_in = |group: &str, shard: usize, jobs: u32| {
        let group_runs = &by_group[group];
        let order: Vec<u32> = group_runs.iter().map(|run| run.n).collect();
        assert_eq!(order, (0..jobs).collect::<Vec<_>>(), "FIFO in {group}");
        assert!(
            group_runs.iter().all(|run| run.shard == shard),
            "{group} ran in its shard only: {group_runs:?}"
        );
    };
    for g in 0..GROUPS {
        in_order_in(&group_id(g), route(g), PER_GROUP);
    }
    in_order_in(SHARED_GROUP, shared, SHARED);
    // the loose jobs: a group of its own each
    let mut loose: Vec<u32> = runs
        .iter()
        .filter(|run| run.group.starts_with("own:"))
        .map(|run| run.n)
        .collect();
    // (a group of its own is named by its job's id, which is its shard's: not counted here)
    let named = by_group.keys().filter(|g| !g.starts_with("own:")).count();
    assert_eq!(named, GROUPS + 1);
    loose.sort_unstable();
    assert_eq!(loose, (0..LOOSE).collect::<Vec<_>>());
}

/// Three schemas in one database, on one pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_of_one_database_are_one_queue() {
    // the schemas' names, reserved (and dropped at the end) by the suite
    let reserved = [
        SuiteSchema::unmigrated().await,
        SuiteSchema::unmigrated().await,
        SuiteSchema::unmigrated().await,
    ];
    let pool = reserved[0].pool.clone();
    let shards = Shards::new(reserved.iter().map(|q| (pool.clone(), q.schema.clone()))).unwrap();
    assert_eq!(shards.len(), 3);
    shards.migrate().await.unwrap();
    for ((index, shard), q) in shards.iter().enumerate().zip(&reserved) {
        assert_eq!((shard.index(), shard.schema()), (index, &q.schema));
    }
    enqueue_run_and_check(&shards).await;
}

/// Counts the jobs in `shard`'s schema.
async fn jobs_in(shard: &Shard) -> i64 {
    shard.client().stats().await.unwrap().jobs.value()
}

/// Three databases, a shard each (the same schema name in each: not a duplicate); and the
/// transactional enqueue into a job's shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_of_their_own_are_one_queue() {
    let databases = [
        TestDatabase::new().await,
        TestDatabase::new().await,
        TestDatabase::new().await,
    ];
    let mut pools: Vec<PgPool> = Vec::new();
    for database in &databases {
        pools.push(pool_with(&database.url, 10).await);
    }
    let schema = Schema::new("jobs").unwrap();
    let shards = Shards::new(pools.iter().map(|pool| (pool.clone(), schema.clone()))).unwrap();
    shards.migrate().await.unwrap();
    for (shard, database) in shards.iter().zip(&databases) {
        let name: String = sqlx::query_scalar("SELECT current_database()")
            .fetch_one(shard.pool())
            .await
            .unwrap();
        assert_eq!(
            name,
            database.name,
            "shard {} is its database",
            shard.index()
        );
    }
    enqueue_run_and_check(&shards).await;

    // in a transaction of the job's shard's database: gone with a rollback
    let job = Grouped {
        group: group_name(7),
        n: 0,
    };
    let shard = shards.shard_for(&job);
    assert_eq!(shard.index(), shards.shard_of_group(&group_id(7)).index());
    let mut tx = shard.pool().begin().await.unwrap();
    shard.enqueue(job, &mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(jobs_in(shard).await, 0, "rolled back: no job");
    // … and there with a commit
    let mut tx = shard.pool().begin().await.unwrap();
    let job = Grouped {
        group: group_name(7),
        n: 1,
    };
    shard.enqueue(job, &mut *tx).await.unwrap();
    assert_eq!(jobs_in(shard).await, 0, "not before the commit");
    tx.commit().await.unwrap();
    assert_eq!(jobs_in(shard).await, 1, "committed: the job");
    let others: i64 = {
        let mut sum = 0;
        for other in shards.iter().filter(|s| s.index() != shard.index()) {
            sum += jobs_in(other).await;
        }
        sum
    };
    assert_eq!(others, 0, "nothing in the other shards");

    for pool in pools {
        pool.close().await;
    }
}

/// A job with a group, a unique key, both or neither, implemented by hand.
#[derive(Serialize, Deserialize)]
struct Keyed {
    group: Option<String>,
    unique: Option<String>,
}

impl Job for Keyed {
    const KIND: &'static str = "keyed";
    fn group(&self) -> Option<String> {
        self.group.clone()
    }
    fn unique(&self) -> Option<Unique> {
        self.unique.clone().map(Unique::new)
    }
}

/// Shards on pools that never connect (routing needs no database).
fn lazy_shards(count: usize) -> Shards {
    let pool = PgPool::connect_lazy(&database_url()).unwrap();
    Shards::schemas(&pool, "route", count).unwrap()
}

/// The route of a group is pinned: these values were computed by a Python reference of
/// FNV-1a 64 then jump consistent hash (see harel-jobs/src/shards.rs); a change of either
/// algorithm moves groups between shards, and fails here.
// a tokio test: a lazy pool needs a runtime, even unused
#[tokio::test]
async fn the_route_is_pinned() {
    let sizes = [1, 2, 4, 5, 16, 1024];
    let pinned: [(&str, [usize; 6]); 5] = [
        ("", [0, 1, 1, 1, 13, 266]),
        ("user-42", [0, 0, 0, 0, 9, 364]),
        ("account:7", [0, 1, 2, 2, 6, 345]),
        ("tenant/éclair", [0, 1, 1, 1, 9, 658]),
        ("order-123456", [0, 0, 0, 0, 0, 731]),
    ];
    let shards = sizes.map(lazy_shards);
    for (group, expected) in pinned {
        let got = shards
            .each_ref()
            .map(|shards| shards.shard_of_group(group).index());
        assert_eq!(got, expected, "{group:?}");
    }
}

/// Going from 4 to 5 shards moves about a fifth of the groups, each to the new shard; the
/// 5 shards share the groups evenly.
// a tokio test: a lazy pool needs a runtime, even unused
#[tokio::test]
async fn a_fifth_shard_takes_a_fifth_of_the_groups() {
    let (four, five) = (lazy_shards(4), lazy_shards(5));
    let groups = 10_000;
    let mut moved = 0;
    let mut per_shard = [0_usize; 5];
    for g in 0..groups {
        let group = format!("group-{g}");
        let (before, after) = (
            four.shard_of_group(&group).index(),
            five.shard_of_group(&group).index(),
        );
        per_shard[after] += 1;
        if before != after {
            moved += 1;
            assert_eq!(
                after, 4,
                "{group} moved from {before} to an old shard, {after}"
            );
        }
    }
    assert!(
        (1_500..=2_500).contains(&moved),
        "{moved} of {groups} groups moved"
    );
    for count in per_shard {
        assert!((1_700..=2_300).contains(&count), "{per_shard:?}");
    }
}

/// A job's route: its group, else its unique key, else round-robin; an enqueue option's
/// group routes as that group.
#[tokio::test]
async fn a_job_is_routed_by_its_group_else_its_unique_key_else_round_robin() {
    let shards = lazy_shards(16);
    let keyed = |group: Option<&str>, unique: Option<&str>| Keyed {
        group: group.map(str::to_owned),
        unique: unique.map(str::to_owned),
    };
    let of = |key: &str| shards.shard_of_group(key).index();
    // "user-42" and "account:7" route to shards 9 and 6 of 16 (pinned above)
    let both = keyed(Some("user-42"), Some("account:7"));
    assert_eq!(shards.shard_for(&both).index(), of("user-42"));
    let unique_only = keyed(None, Some("account:7"));
    for _ in 0..3 {
        assert_eq!(shards.shard_for(&unique_only).index(), of("account:7"));
    }
    let neither = keyed(None, None);
    let first = shards.shard_for(&neither).index();
    let next: Vec<usize> = (1..=20)
        .map(|_| shards.shard_for(&neither).index())
        .collect();
    let expected: Vec<usize> = (1..=20).map(|i| (first + i) % 16).collect();
    assert_eq!(next, expected, "round-robin");

    // a batch routes each job by the group its options give
    let mut batch = shards.batch();
    batch
        .push_with(neither, &EnqueueOptions::new().group("user-42"))
        .unwrap();
    assert_eq!(batch.len(), 1);
}

/// No shard, two shards that are one schema of one database, a bad name, too many.
// a tokio test: a lazy pool needs a runtime, even unused
#[tokio::test]
async fn sets_that_cannot_route_are_refused() {
    let url = database_url();
    let pool = PgPool::connect_lazy(&url).unwrap();
    let jobs = Schema::new("jobs").unwrap();
    let other = Schema::new("other").unwrap();

    let empty = Shards::new(Vec::<(PgPool, Schema)>::new());
    assert!(matches!(empty, Err(ShardsError::Empty)), "{empty:?}");
    assert!(matches!(
        Shards::schemas(&pool, "jobs", 0),
        Err(ShardsError::Empty)
    ));

    // the same pool twice, or another pool on the same URL: one schema of one database
    let twice = Shards::new([
        (pool.clone(), jobs.clone()),
        (pool.clone(), other.clone()),
        (pool.clone(), jobs.clone()),
    ]);
    match twice {
        Err(ShardsError::Duplicate {
            first: 0,
            second: 2,
            ref schema,
            ref database,
        }) => {
            assert_eq!(schema, "jobs");
            let options = pool.connect_options();
            let name = options.get_database().unwrap_or(options.get_username());
            assert!(database.ends_with(&format!("/{name}")), "{database}");
        }
        other => panic!("{other:?}"),
    }
    let message = twice.unwrap_err().to_string();
    assert!(message.contains("shards 0 and 2"), "{message}");
    let again = PgPool::connect_lazy(&url).unwrap();
    assert!(matches!(
        Shards::new([(pool.clone(), jobs.clone()), (again, jobs.clone())]),
        Err(ShardsError::Duplicate { .. })
    ));

    // the same schema in another database, or another schema: fine
    let options = (*pool.connect_options()).clone().database("elsewhere");
    let elsewhere = PgPool::connect_lazy_with(options);
    assert!(Shards::new([(pool.clone(), jobs.clone()), (elsewhere, jobs.clone())]).is_ok());
    assert!(Shards::new([(pool.clone(), jobs.clone()), (pool.clone(), other)]).is_ok());

    assert!(matches!(
        Shards::schemas(&pool, "Jobs", 2),
        Err(ShardsError::InvalidSchema(_))
    ));
    assert!(matches!(
        Shards::schemas(&pool, "jobs", MAX_SHARDS + 1),
        Err(ShardsError::TooMany { count }) if count == MAX_SHARDS + 1
    ));
    assert_eq!(
        Shards::schemas(&pool, "jobs", MAX_SHARDS).unwrap().len(),
        MAX_SHARDS
    );
}
