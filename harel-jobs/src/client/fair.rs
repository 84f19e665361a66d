//! Fair share between fairness keys, as an operator sees it: set a key's weight
//! ([`Client::set_fair_weight`]), limit each key's running jobs
//! ([`Client::set_key_limits`]) and list a queue's keys ([`Client::fair_keys`]).

use super::Client;
use crate::error::{ClientError, DatabaseError};
use std::time::Duration;

use super::RateLimit;
use super::queues::{concurrency_arg, queue_error, rate_arg, rate_from_row};
use crate::store::FairKeyRow;
use crate::vocabulary::{
    Count, MAX_FAIR_WEIGHT, QUEUE_NAME_RULE, validate_fair_key, validate_queue_name,
};

/// A fairness key of a queue, as [`Client::fair_keys`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairKeyInfo {
    /// The key (`""`: the jobs enqueued without one).
    pub key: String,
    /// Its weight: its share of the starts against the other keys with ready work (1
    /// unless set).
    pub weight: u32,
    /// Its ready groups (every level, those waiting for room under the queue's
    /// [`KeyLimits`] included), counted up to 10,000 per level.
    pub ready: Count,
    /// Its running jobs (live leases). Exact in a queue with [`KeyLimits`]; otherwise
    /// counted among the queue's first 10,000 leased or waiting groups per level, and
    /// [`Count::AtLeast`] when that scan was cut short.
    pub running: Count,
}

/// The limits on each fairness key's jobs in a queue, over every worker process
/// ([`Client::set_key_limits`]).
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::KeyLimits;
///
/// // each customer: at most 5 of their jobs at a time, 20 starts a second
/// let per_customer = KeyLimits::none().concurrency(5).rate(20, Duration::from_secs(1));
/// assert_eq!(per_customer.concurrency_limit(), Some(5));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KeyLimits {
    concurrency: Option<u32>,
    rate: Option<RateLimit>,
}

impl KeyLimits {
    /// No limit per key: fair share alone decides.
    pub fn none() -> Self {
        Self::default()
    }

    /// At most `running` of each key's jobs of the queue run at once, over every worker
    /// (1 to 1,000,000).
    pub fn concurrency(mut self, running: u32) -> Self {
        self.concurrency = Some(running);
        self
    }

    /// At most `starts` of each key's jobs of the queue start per `per`, over every worker
    /// (1 to 1,000,000 per 1 ms to 24 h); a burst of up to `starts` is allowed after a quiet
    /// period.
    pub fn rate(mut self, starts: u32, per: Duration) -> Self {
        self.rate = Some(RateLimit { starts, per });
        self
    }

    /// The limit on each key's running jobs, if any.
    pub fn concurrency_limit(&self) -> Option<u32> {
        self.concurrency
    }

    /// The limit on each key's rate of starts, if any.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.rate
    }
}

/// A page of [`Client::fair_keys`], in key order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairKeyPage {
    /// The keys of this page.
    pub keys: Vec<FairKeyInfo>,
    /// Where the next page starts (pass it as `after`); `None`: this was the last.
    pub next: Option<String>,
    /// The queue's limits per key ([`Client::set_key_limits`]).
    pub limits: KeyLimits,
}

/// The most keys one page of [`Client::fair_keys`] holds.
pub const MAX_FAIR_KEY_PAGE: u32 = 1_000;

impl Client {
    /// Sets a fairness key's weight in a queue (1 to [`MAX_FAIR_WEIGHT`]; 1, every key's
    /// weight unless set, removes the setting). Among the keys with ready work in a queue
    /// and a priority level, claims give each key starts in proportion to its weight. The
    /// change applies to the groups that become ready after it: those already waiting keep
    /// their places. A queue that does not exist is refused (create it first with
    /// [`create_queue`](Client::create_queue)).
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for an invalid queue name, key or weight;
    /// [`ClientError::UnknownQueue`]; [`ClientError::Database`] (also past 100,000 weighted
    /// keys per schema).
    pub async fn set_fair_weight(
        &self,
        queue: &str,
        key: &str,
        weight: u32,
    ) -> Result<(), ClientError> {
        validate_queue_name(queue).map_err(|_| ClientError::InvalidArgument(QUEUE_NAME_RULE))?;
        validate_fair_key(key).map_err(|_| {
            ClientError::InvalidArgument("a fairness key is at most 255 bytes, without NUL")
        })?;
        if !(1..=MAX_FAIR_WEIGHT).contains(&weight) {
            return Err(ClientError::InvalidArgument("a weight is 1 to 1,000"));
        }
        self.store()
            .fair_weight_set(self.pool(), queue, key, weight as i32)
            .await
            .map_err(|e| queue_error(queue, e))?;
        Ok(())
    }

    /// Sets the limits on each fairness key's jobs in a queue ([`KeyLimits::none`] removes
    /// them), over every worker process. A queue that does not exist is refused (create it
    /// first with [`create_queue`](Client::create_queue)).
    ///
    /// The next claim applies them. Claims of a queue with a limit per key run one at a
    /// time (as a limited queue's do, [`Client::set_limits`]) and count each key's live
    /// leases and recent starts:
    /// - a key at its running limit starts nothing more until one of its jobs ends, and its
    ///   other ready groups wait, in their order, behind every group that can start (they
    ///   are not skipped over at each claim). A lower limit lets the running jobs finish; a
    ///   higher one, or none, puts the waiting groups back in line, oldest first: the first
    ///   1,000 in this call, the rest 10,000 a second by the workers' housekeeping, so that
    ///   the call stays short and the queue's claims go on meanwhile;
    /// - a key past its rate has its next groups set aside until the start time the rate
    ///   gives each (one interval apart); they show as scheduled until then. A changed rate
    ///   starts every key afresh; groups already set aside keep their times.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for an invalid queue name or a limit out of range;
    /// [`ClientError::UnknownQueue`]; [`ClientError::Database`].
    pub async fn set_key_limits(&self, queue: &str, limits: KeyLimits) -> Result<(), ClientError> {
        validate_queue_name(queue).map_err(|_| ClientError::InvalidArgument(QUEUE_NAME_RULE))?;
        let concurrency = concurrency_arg(
            limits.concurrency,
            "a concurrency limit per key is 1 to 1,000,000",
        )?;
        let rate = rate_arg(
            limits.rate,
            "a rate limit per key is 1 to 1,000,000 starts per 1 ms to 24 h",
        )?;
        self.store()
            .key_limits_set(self.pool(), queue, concurrency, rate)
            .await
            .map_err(|e| queue_error(queue, e))?;
        Ok(())
    }

    /// A page of a queue's fairness keys in key order, after `after` (`None`: from the
    /// first): the keys that have ready groups and the keys with a weight set, with their
    /// weights, ready groups and running jobs, and the queue's [`KeyLimits`]. At most `limit` keys (1 to [`MAX_FAIR_KEY_PAGE`]); one
    /// round trip whose cost does not grow with the number of keys. Leased, retrying and
    /// scheduled groups are not in the ready count. An unknown queue has no keys.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a limit out of range; [`ClientError::Database`].
    pub async fn fair_keys(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<FairKeyPage, ClientError> {
        if !(1..=MAX_FAIR_KEY_PAGE).contains(&limit) {
            return Err(ClientError::InvalidArgument("a page holds 1 to 1,000 keys"));
        }
        let rows = self
            .store()
            .fair_keys_list(self.pool(), queue, after, limit as i32)
            .await
            .map_err(DatabaseError::new)?;
        Ok(fair_key_page(rows))
    }
}

fn fair_key_page(rows: Vec<FairKeyRow>) -> FairKeyPage {
    let mut page = FairKeyPage::default();
    let mut more = false;
    let count = |n: Option<i64>, exact: Option<bool>| {
        let n = n.unwrap_or(0);
        if exact.unwrap_or(true) {
            Count::Exact(n)
        } else {
            Count::AtLeast(n)
        }
    };
    for (
        key,
        weight,
        ready,
        ready_exact,
        running,
        running_exact,
        cursor_more,
        key_limit,
        rate,
        rate_ms,
    ) in rows
    {
        match key {
            Some(key) => page.keys.push(FairKeyInfo {
                key,
                weight: u32::try_from(weight.unwrap_or(1)).unwrap_or(1),
                ready: count(ready, ready_exact),
                running: count(running, running_exact),
            }),
            None => {
                more = cursor_more.unwrap_or(false);
                page.limits.concurrency = key_limit.and_then(|n| u32::try_from(n).ok());
                page.limits.rate = rate_from_row(rate, rate_ms);
            }
        }
    }
    if more {
        page.next = page.keys.last().map(|k| k.key.clone());
    }
    page
}
