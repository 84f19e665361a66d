//! One logical queue spread over several queue schemas, *shards*, when one PostgreSQL
//! primary is not enough: [`Shards`] routes each group to one shard by a stable hash, and
//! hands out each shard's [`Client`], worker pool and enqueues.
//!
//! The route and what sharding changes are told on [`Shards`].

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::{PgExecutor, PgPool};

use crate::client::{Client, Stats};
use crate::enqueue::{Enqueue, EnqueueOptions, JobBatch};
use crate::error::{MigrateError, PublishError, ShardsError};
use crate::job::Job;
use crate::schema::Schema;
use crate::transport::PreparedStatements;
use crate::vocabulary::{JobId, MAX_SHARDS};
use crate::worker::WorkerBuilder;

/// One shard of a [`Shards`]: a queue schema on a pool, and its index in the set.
///
/// Everything of one shard goes through it: its [`Client`], its worker pools
/// ([`worker`](Self::worker)), enqueues in a transaction of its database
/// ([`enqueue`](Self::enqueue)).
#[derive(Clone, Debug)]
pub struct Shard {
    index: usize,
    client: Client,
}

impl Shard {
    /// Its index in the [`Shards`] it belongs to (`0..shards.len()`), as routes and
    /// [`ShardedJobId`]s name it.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The pool of its database.
    pub fn pool(&self) -> &PgPool {
        self.client.pool()
    }

    /// Its schema.
    pub fn schema(&self) -> &Schema {
        self.client.schema()
    }

    /// The [`Client`] of its schema (cheap to clone).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A worker pool for this shard (its pool and schema set), sharing `state` with its
    /// handlers: register job types and set options, then `build()` and `start()`.
    pub fn worker<S: Send + Sync + 'static>(&self, state: S) -> WorkerBuilder<S> {
        self.client.worker(state)
    }

    /// Creates or upgrades its schema ([`migrate_schema`](crate::migrate_schema)).
    ///
    /// # Errors
    /// As [`migrate_schema`](crate::migrate_schema).
    pub async fn migrate(&self) -> Result<(), MigrateError> {
        self.client.migrate().await
    }

    /// Enqueues `job` into this shard through `executor`, which must be a connection or
    /// transaction of this shard's database (`&mut *tx` from `shard.pool().begin()`): the
    /// job exists if and only if it commits. Options go on the returned [`Enqueue`].
    ///
    /// The shard must be the job's route: [`Shards::shard_for`] for the job as it is, or
    /// [`Shards::shard_of_group`] of the group given to [`Enqueue::group`]. Dependencies
    /// ([`Enqueue::after`]) must be jobs of this shard.
    pub fn enqueue<'c, J: Job, E: PgExecutor<'c>>(&self, job: J, executor: E) -> Enqueue<'c, J, E> {
        self.client.enqueue(executor, job)
    }

    /// An empty [`JobBatch`] for this shard's schema, to enqueue in a transaction of its
    /// database; every job added must route to this shard.
    pub fn batch(&self) -> JobBatch {
        self.client.batch()
    }
}

/// The id of a job enqueued through [`Shards`]: a [`JobId`] is unique within its shard
/// only, so a job is known by its shard's index and its id there.
///
/// ```no_run
/// # async fn example(shards: harel_jobs::Shards, id: harel_jobs::ShardedJobId)
/// #     -> Result<(), Box<dyn std::error::Error>> {
/// if let Some(shard) = shards.get(id.shard) {
///     let job = shard.client().job(id.id).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardedJobId {
    /// The shard's index ([`Shard::index`]).
    pub shard: usize,
    /// The job's id in that shard.
    pub id: JobId,
}

/// Several queue schemas, *shards*, used as one queue: each group is routed to one shard by
/// a stable hash ([below](#the-route-part-of-what-is-stored)), each shard has its own worker
/// pools.
///
/// A shard is a pool and a schema: schemas in one database, or in databases of their own
/// on separate primaries. Cheap to clone (the clones share the round-robin counter).
///
/// ```no_run
/// use harel_jobs::{job, JobContext, JobResult, Shards};
///
/// #[job]
/// async fn sync_account(_ctx: JobContext<()>, #[group] account_id: i64) -> JobResult {
///     Ok(())
/// }
///
/// # async fn example(pool: sqlx::PgPool, other: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// // four schemas jobs_0 … jobs_3 in one database; or one shard per database:
/// // Shards::new([(pool, Schema::new("jobs")?), (other, Schema::new("jobs")?)])?
/// let shards = Shards::schemas(&pool, "jobs", 4)?;
/// shards.migrate().await?;
///
/// // a worker pool per shard
/// let mut handles = Vec::new();
/// for shard in shards.iter() {
///     handles.push(shard.worker(()).register::<SyncAccount>().build()?.start());
/// }
///
/// // every job of account 42 goes to one shard, and runs there in order
/// let id = shards.enqueue(SyncAccount { account_id: 42 }).await?;
/// println!("job {} of shard {}", id.id, id.shard);
///
/// // in a transaction: of the job's shard's database
/// let job = SyncAccount { account_id: 7 };
/// let shard = shards.shard_for(&job);
/// let mut tx = shard.pool().begin().await?;
/// shard.enqueue(job, &mut *tx).await?;
/// tx.commit().await?;
///
/// for handle in handles {
///     handle.shutdown().await?;
/// }
/// # Ok(()) }
/// ```
///
/// # The route: part of what is stored
///
/// A group's jobs must all be in one shard, or its FIFO order and its one-at-a-time
/// guarantee are lost, so the route of a group must be the same in every process and every
/// release. It is, in full:
///
/// 1. the 64-bit FNV-1a hash of the route key's UTF-8 bytes (offset basis
///    `0xcbf29ce484222325`, prime `0x100000001b3`: for each byte, XOR, then multiply
///    modulo 2⁶⁴);
/// 2. that hash, as the key of the *jump consistent hash* of Lamping and Veach ("A Fast,
///    Minimal Memory, Consistent Hash Algorithm", 2014, the figure's function, its
///    arithmetic in IEEE doubles as there), over the number of shards: the shard's index.
///
/// Both are fixed by test vectors; a change to either is a breaking change. With jump hash,
/// going from `n` to `n + 1` shards moves about `1/(n + 1)` of the groups, each to the new
/// shard (where `hash % n` would move nearly all of them). A group that moves while it has
/// jobs in its old shard runs in two shards at once, out of order, until those are done: add
/// shards with the producers paused, or once the queues are drained.
///
/// The route key of a job is, in this order: its group (an enqueue's `group` override, else
/// [`Job::group`]); else, for a job without a group, its unique key (the override, else
/// [`Job::unique`]), so that a unique job's duplicates meet in one shard; else none: the job
/// is a group of its own, any shard will do, and jobs without a key are spread round-robin
/// (a counter shared by the clones of a [`Shards`]).
///
/// # What sharding changes
///
/// Each shard is a whole queue: priorities, named queues, limits, fairness, unique keys,
/// dependencies, workflows, dead letters and figures are each shard's own. A job's id is
/// its shard's ([`ShardedJobId`]: the shard's index and the id). An enqueue into a shard is
/// transactional in that shard's database only; a [`ShardedBatch`] is one transaction per
/// shard, not one across them.
#[derive(Clone, Debug)]
pub struct Shards {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shards: Vec<Shard>,
    /// The round-robin counter of jobs without a route key.
    next: AtomicUsize,
}

impl Shards {
    /// The shards `shards`, in order: the first is shard 0. The order is part of the route:
    /// keep it (append new shards at the end).
    ///
    /// Two shards may not be one schema of one database. That is checked on what the pools'
    /// connect options say: the host (or Unix socket directory), the port, the database
    /// name (the user name when none is set), compared as written, and the schema's name. So
    /// it catches the same URL given twice, but not two names of one server
    /// (`localhost` and `127.0.0.1`, a DNS alias, a pooler or a proxy in front of it, a
    /// replica of it), which it takes for different servers.
    ///
    /// # Errors
    /// [`ShardsError::Empty`] for no shard, [`ShardsError::TooMany`] for more than
    /// [`MAX_SHARDS`], [`ShardsError::Duplicate`] for two shards that are one schema of one
    /// database as above.
    pub fn new(shards: impl IntoIterator<Item = (PgPool, Schema)>) -> Result<Self, ShardsError> {
        let shards: Vec<(PgPool, Schema)> = shards.into_iter().collect();
        check_count(shards.len())?;
        let mut seen: HashMap<(String, &str), usize> = HashMap::with_capacity(shards.len());
        for (index, (pool, schema)) in shards.iter().enumerate() {
            let database = database_of(pool);
            if let Some(first) = seen.insert((database.clone(), schema.name()), index) {
                return Err(ShardsError::Duplicate {
                    first,
                    second: index,
                    schema: schema.name().to_owned(),
                    database,
                });
            }
        }
        let shards = shards
            .into_iter()
            .enumerate()
            .map(|(index, (pool, schema))| Shard {
                index,
                client: Client::with_schema(pool, schema),
            })
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                shards,
                next: AtomicUsize::new(0),
            }),
        })
    }

    /// `count` shards on one pool, the schemas `{prefix}_0` to `{prefix}_{count - 1}`.
    ///
    /// # Errors
    /// [`ShardsError::Empty`] and [`ShardsError::TooMany`] as [`new`](Self::new);
    /// [`ShardsError::InvalidSchema`] if the names are not valid [`Schema`] names.
    pub fn schemas(pool: &PgPool, prefix: &str, count: usize) -> Result<Self, ShardsError> {
        check_count(count)?;
        let shards = (0..count)
            .map(|index| Ok((pool.clone(), Schema::new(&format!("{prefix}_{index}"))?)))
            .collect::<Result<Vec<_>, ShardsError>>()?;
        Self::new(shards)
    }

    /// Sends every shard's statements as `statements` says (default
    /// [`PreparedStatements::Cached`]; see [`Client::prepared_statements`]).
    pub fn prepared_statements(self, statements: PreparedStatements) -> Self {
        let shards = self
            .inner
            .shards
            .iter()
            .map(|shard| Shard {
                index: shard.index,
                client: shard.client.clone().prepared_statements(statements),
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                shards,
                next: AtomicUsize::new(self.inner.next.load(Ordering::Relaxed)),
            }),
        }
    }

    /// How many shards: at least 1, at most [`MAX_SHARDS`].
    // never empty (`new` refuses it), so there is no `is_empty` to pair it with
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.inner.shards.len()
    }

    /// The shards, in index order.
    pub fn iter(&self) -> std::slice::Iter<'_, Shard> {
        self.inner.shards.iter()
    }

    /// The shard of index `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&Shard> {
        self.inner.shards.get(index)
    }

    /// The shard of the group `group` (or of any route key: see
    /// [the route](Self#the-route-part-of-what-is-stored)). The same group always gives the
    /// same shard, in every process and release, for the same number of shards.
    ///
    /// `group` is the group id as the job is enqueued with it: [`Job::group`] (for a
    /// `#[group]` parameter that is the kind, `:` and the value, as in `sync_account:42`),
    /// or the group given to [`Enqueue::group`], whose route this is: the route must use
    /// the group the job is enqueued with.
    pub fn shard_of_group(&self, group: &str) -> &Shard {
        let index = route(group, self.len());
        // `route` is below `len` for a non-empty set, which `new` guarantees
        &self.inner.shards[index]
    }

    /// The shard of `job` as it is (no group or unique key override): the shard of its
    /// group, else of its unique key, else the next one round-robin (so two calls for a job
    /// without either may differ: keep the shard you enqueue into).
    pub fn shard_for<J: Job>(&self, job: &J) -> &Shard {
        self.pick(route_key(job, &EnqueueOptions::new()).as_deref())
    }

    /// Enqueues `job` into its shard ([`shard_for`](Self::shard_for)), on that shard's
    /// pool, in a transaction of its own; awaited, it answers the job's [`ShardedJobId`].
    ///
    /// To enqueue inside a transaction, use the job's shard: [`shard_for`](Self::shard_for)
    /// then [`Shard::enqueue`].
    pub fn enqueue<J: Job>(&self, job: J) -> ShardEnqueue<'_, J> {
        self.enqueue_with(job, &EnqueueOptions::new())
    }

    /// Enqueues `job` with `options` (delay, priority, group, unique key, queue, fairness
    /// key) as [`enqueue`](Self::enqueue) does, into the shard its group or unique key in
    /// `options` routes it to: an override given here is the route. Parents
    /// ([`EnqueueOptions::after`]) must be jobs of that shard.
    ///
    /// ```no_run
    /// # use harel_jobs::{EnqueueOptions, Job, Shards};
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping;
    /// # impl Job for Ping { const KIND: &'static str = "ping"; }
    /// # async fn example(shards: Shards) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let later = EnqueueOptions::new().group("user-42").delay(Duration::from_secs(60));
    /// let id = shards.enqueue_with(Ping, &later).await?;
    /// assert_eq!(id.shard, shards.shard_of_group("user-42").index());
    /// # Ok(()) }
    /// ```
    pub fn enqueue_with<J: Job>(&self, job: J, options: &EnqueueOptions) -> ShardEnqueue<'_, J> {
        ShardEnqueue {
            shards: self,
            job,
            options: options.clone(),
        }
    }

    /// An empty [`ShardedBatch`]: jobs of any kinds, each added to its shard's part.
    pub fn batch(&self) -> ShardedBatch<'_> {
        ShardedBatch {
            shards: self,
            parts: self.iter().map(|_| None).collect(),
            placed: Vec::new(),
        }
    }

    /// The [`Client`] of each shard, in index order: what is not summed here (depth by
    /// queue, dead letters, pause, cancel) is asked of each shard.
    pub fn clients(&self) -> impl ExactSizeIterator<Item = &Client> {
        self.iter().map(Shard::client)
    }

    /// Creates or upgrades every shard's schema, one after the other, in index order.
    ///
    /// # Errors
    /// [`ShardsError::Migrate`] naming the first shard that failed; the ones before it are
    /// migrated, the ones after it not tried.
    pub async fn migrate(&self) -> Result<(), ShardsError> {
        for shard in self.iter() {
            shard
                .migrate()
                .await
                .map_err(|source| ShardsError::Migrate {
                    shard: shard.index,
                    source,
                })?;
        }
        Ok(())
    }

    /// The figures of every shard together: each [`Stats`] count summed, exact if every
    /// shard's is, an estimate if any is, else a lower bound; idle if every shard is. Read
    /// one shard after the other, so not one snapshot.
    ///
    /// # Errors
    /// [`ShardsError::Client`] naming the first shard whose figures could not be read.
    pub async fn stats(&self) -> Result<Stats, ShardsError> {
        let mut total: Option<Stats> = None;
        for shard in self.iter() {
            let stats = shard
                .client
                .stats()
                .await
                .map_err(|source| ShardsError::Client {
                    shard: shard.index,
                    source,
                })?;
            total = Some(match total {
                Some(total) => total.plus(stats),
                None => stats,
            });
        }
        // a Shards is never empty; the fallback only keeps this free of a panic
        total.ok_or(ShardsError::Empty)
    }

    /// The shard of route key `key`, or the next one round-robin for none.
    fn pick(&self, key: Option<&str>) -> &Shard {
        match key {
            Some(key) => self.shard_of_group(key),
            None => {
                let next = self.inner.next.fetch_add(1, Ordering::Relaxed);
                &self.inner.shards[next % self.len()]
            }
        }
    }
}

/// Refuses a shard count of 0 or over [`MAX_SHARDS`].
fn check_count(count: usize) -> Result<(), ShardsError> {
    match count {
        0 => Err(ShardsError::Empty),
        count if count > MAX_SHARDS => Err(ShardsError::TooMany { count }),
        _ => Ok(()),
    }
}

/// Where `pool` connects, as its options say: `host:port/database`.
fn database_of(pool: &PgPool) -> String {
    let options = pool.connect_options();
    let host = match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => options.get_host().to_ascii_lowercase(),
    };
    // PostgreSQL's default database is the user's name
    let database = options.get_database().unwrap_or(options.get_username());
    format!("{host}:{}/{database}", options.get_port())
}

/// The route key of `job` enqueued with `options` (see `Shards`).
fn route_key<J: Job>(job: &J, options: &EnqueueOptions) -> Option<String> {
    options
        .group_override()
        .map(str::to_owned)
        .or_else(|| job.group())
        .or_else(|| {
            options
                .unique_override()
                .map(|unique| unique.key().to_owned())
        })
        .or_else(|| job.unique().map(|unique| unique.key().to_owned()))
}

/// The index of the shard of route key `key` among `shards` (1 to [`MAX_SHARDS`]).
fn route(key: &str, shards: usize) -> usize {
    let buckets = u32::try_from(shards).unwrap_or(u32::MAX);
    jump_consistent_hash(fnv1a_64(key.as_bytes()), buckets) as usize
}

/// FNV-1a, 64 bits.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

/// Lamping and Veach's jump consistent hash: the bucket of `key` among `buckets` (0 for no
/// bucket). Each step draws, with a 64-bit linear congruential generator seeded by the key,
/// the next bucket count at which the key jumps; the last jump below `buckets` is its
/// bucket. The doubles are the paper's: IEEE arithmetic, the same on every platform.
fn jump_consistent_hash(mut key: u64, buckets: u32) -> u32 {
    const MULTIPLIER: u64 = 2_862_933_555_777_941_757;
    let buckets = i64::from(buckets);
    let (mut bucket, mut next) = (-1_i64, 0_i64);
    while next < buckets {
        bucket = next;
        key = key.wrapping_mul(MULTIPLIER).wrapping_add(1);
        let draw = ((key >> 33) + 1) as f64;
        next = ((bucket + 1) as f64 * ((1_u64 << 31) as f64 / draw)) as i64;
    }
    u32::try_from(bucket).unwrap_or(0)
}

/// One job on its way into its shard, answering its [`ShardedJobId`] when awaited. Made by
/// [`Shards::enqueue`] and [`Shards::enqueue_with`]; enqueued on the shard's pool, in a
/// transaction of its own.
///
/// The shard is chosen when it is awaited, from the job and its options: a group or a
/// unique key in the options is the route.
#[must_use = "an enqueue does nothing until awaited"]
pub struct ShardEnqueue<'s, J> {
    shards: &'s Shards,
    job: J,
    options: EnqueueOptions,
}

impl<'s, J: Job> IntoFuture for ShardEnqueue<'s, J> {
    type Output = Result<ShardedJobId, PublishError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 's>>;

    fn into_future(self) -> Self::IntoFuture {
        let key = route_key(&self.job, &self.options);
        let shard = self.shards.pick(key.as_deref());
        let enqueue = shard
            .enqueue(self.job, shard.pool())
            .with_options(self.options);
        Box::pin(async move {
            let id = enqueue.await?;
            Ok(ShardedJobId {
                shard: shard.index,
                id,
            })
        })
    }
}

/// Many jobs, of any kinds, each added to the part of its shard: one [`JobBatch`] per
/// shard, enqueued on that shard's pool. Made by [`Shards::batch`].
///
/// **Not atomic across shards**: each shard's part is one transaction, written one after
/// the other; if one fails, the parts before it stay written ([`ShardsError::Enqueue`] says
/// which jobs). Jobs of one group keep the batch's order. A unique job's duplicate gets the
/// id of the job holding its key, as with [`JobBatch::enqueue`]. Dependencies are within one
/// shard: for them, or to enqueue inside a transaction of yours, use a [`Shard::batch`].
///
/// ```no_run
/// # use harel_jobs::{EnqueueOptions, Job, Shards};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping(u32);
/// # impl Job for Ping { const KIND: &'static str = "ping"; }
/// # async fn example(shards: Shards) -> Result<(), Box<dyn std::error::Error>> {
/// let mut batch = shards.batch();
/// for n in 0..1000 {
///     batch.push_with(Ping(n), &EnqueueOptions::new().group(format!("user-{}", n % 10)))?;
/// }
/// let ids = batch.enqueue().await?;
/// assert_eq!(ids.len(), 1000);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ShardedBatch<'s> {
    shards: &'s Shards,
    /// Each shard's part, made at its first job.
    parts: Vec<Option<JobBatch>>,
    /// The shard of each job, in the order added.
    placed: Vec<usize>,
}

impl ShardedBatch<'_> {
    /// Adds a job as [`JobBatch::push`] does, to the part of its shard
    /// ([`Shards::shard_for`]).
    ///
    /// # Errors
    /// As [`JobBatch::push`]; the batch is unchanged then.
    pub fn push<J: Job>(&mut self, job: J) -> Result<&mut Self, PublishError> {
        self.push_with(job, &EnqueueOptions::new())
    }

    /// Adds a job with `options` as [`JobBatch::push_with`] does, to the part of the shard
    /// its group (or unique key) in `options` routes it to. Parents in `options`
    /// ([`EnqueueOptions::after`]) must be jobs of that shard.
    ///
    /// # Errors
    /// As [`JobBatch::push_with`]; the batch is unchanged then.
    pub fn push_with<J: Job>(
        &mut self,
        job: J,
        options: &EnqueueOptions,
    ) -> Result<&mut Self, PublishError> {
        let shard = self.shards.pick(route_key(&job, options).as_deref());
        // one part per shard, made by `Shards::batch`: every shard's index is in range
        self.parts[shard.index]
            .get_or_insert_with(|| shard.batch())
            .push_with(job, options)?;
        self.placed.push(shard.index);
        Ok(self)
    }

    /// How many jobs it holds.
    pub fn len(&self) -> usize {
        self.placed.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.placed.is_empty()
    }

    /// Enqueues each shard's part on its pool, one shard after the other in index order,
    /// each in one round trip and one transaction. Returns the jobs' ids in the order they
    /// were added.
    ///
    /// # Errors
    /// [`ShardsError::Enqueue`] naming the first shard whose part failed (as
    /// [`JobBatch::enqueue`] fails), with the ids of the jobs written before it.
    pub async fn enqueue(self) -> Result<Vec<ShardedJobId>, ShardsError> {
        let mut written: Vec<Option<std::vec::IntoIter<JobId>>> =
            self.parts.iter().map(|_| None).collect();
        for (shard, part) in self.shards.iter().zip(self.parts) {
            let Some(part) = part else { continue };
            match part.enqueue(shard.pool()).await {
                Ok(ids) => {
                    if let Some(slot) = written.get_mut(shard.index) {
                        *slot = Some(ids.into_iter());
                    }
                }
                Err(source) => {
                    return Err(ShardsError::Enqueue {
                        shard: shard.index,
                        source,
                        enqueued: assign(&self.placed, &mut written),
                    });
                }
            }
        }
        // every part written, each with one id per job (the transport checks it): every
        // job has its id
        Ok(assign(&self.placed, &mut written)
            .into_iter()
            .flatten()
            .collect())
    }
}

/// Gives each job, in the order added, the next id its shard's part was written with.
fn assign(
    placed: &[usize],
    written: &mut [Option<std::vec::IntoIter<JobId>>],
) -> Vec<Option<ShardedJobId>> {
    placed
        .iter()
        .map(|&shard| {
            let id = written.get_mut(shard)?.as_mut()?.next()?;
            Some(ShardedJobId { shard, id })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values computed independently by a short Python script (FNV-1a 64 and the
    // paper's jump hash, 64-bit wrapping by masking, the paper's doubles as Python floats).
    // The two published FNV-1a check values ("a", "foobar") and two jump hash values of
    // another implementation's tests (key 10863919174838991 → 6, 2016238256797177309 → 3,
    // 11 buckets) agree with it.

    #[test]
    fn fnv1a_64_matches_its_reference_values() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a_64("user-42".as_bytes()), 0x32c6_d7a5_4d35_dacb);
        assert_eq!(fnv1a_64("tenant/éclair".as_bytes()), 0x6c77_0add_a6fe_f457);
    }

    #[test]
    fn jump_hash_matches_its_reference_values() {
        let buckets = [1, 2, 3, 5, 10, 100, 1000, 1024];
        let cases: [(u64, [u32; 8]); 5] = [
            (0, [0, 0, 0, 0, 0, 0, 0, 0]),
            (1, [0, 0, 0, 0, 6, 55, 549, 549]),
            (0xdead_beef, [0, 1, 2, 3, 5, 87, 285, 285]),
            (u64::MAX, [0, 1, 2, 2, 9, 92, 313, 313]),
            (0x0123_4567_89ab_cdef, [0, 0, 0, 0, 0, 57, 194, 194]),
        ];
        for (key, expected) in cases {
            let got = buckets.map(|n| jump_consistent_hash(key, n));
            assert_eq!(got, expected, "key {key:#x}");
        }
        assert_eq!(jump_consistent_hash(10_863_919_174_838_991, 11), 6);
        assert_eq!(jump_consistent_hash(2_016_238_256_797_177_309, 11), 3);
        assert_eq!(jump_consistent_hash(42, 0), 0, "no bucket: 0, not a panic");
    }

    #[test]
    fn counts_add_up_as_sure_as_the_least_sure() {
        use crate::vocabulary::Count::{AtLeast, Estimated, Exact};
        assert_eq!(Exact(2).plus(Exact(3)), Exact(5));
        assert_eq!(Exact(2).plus(AtLeast(3)), AtLeast(5));
        assert_eq!(AtLeast(2).plus(Estimated(3)), Estimated(5));
        assert_eq!(Estimated(2).plus(Exact(3)), Estimated(5));
        assert_eq!(Exact(i64::MAX).plus(Exact(1)), Exact(i64::MAX));
    }
}
