//! One queue a pool serves: its own slots, claims and fetcher, so that a flood in one queue
//! never takes the slots of another.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

/// Below this average run time a lane's handlers count as fast, and it claims ahead (see
/// [`Lane::claim_limit`]).
const PREFETCH_BELOW: Duration = Duration::from_millis(5);

/// How far ahead of its handlers a lane claims, in handler time: no more jobs claimed
/// ahead than its handlers finish in this long at their average run time, so that a job
/// claimed ahead waits about this long at most for a slot (under its lease, which other
/// workers cannot take over).
const PREFETCH_WINDOW: Duration = Duration::from_millis(20);

/// A queue served by the pool, with what its fetcher and its jobs share.
pub(crate) struct Lane {
    /// The queue's name (shared with the metrics' `queue` label).
    pub queue: Arc<str>,
    /// Handlers of this queue allowed to run at once.
    pub concurrency: usize,
    /// Jobs claimed and not finished at most while handlers are fast (see `claim_limit`).
    prefetch_limit: usize,
    /// One permit per handler allowed to run.
    pub slots: Arc<Semaphore>,
    /// One permit per job claimed and not yet finished (running or waiting for a slot).
    pub claims: Arc<Semaphore>,
    /// Signalled when a job task ends (a claim permit came back).
    pub job_ended: Notify,
    /// A moving average of handler run times, in microseconds (`u64::MAX`: none yet).
    handler_micros: AtomicU64,
    /// Wakes the fetcher: a NOTIFY arrived, or acks may have freed groups.
    pub wake: Notify,
    /// The oldest group position the NOTIFYs received since the last claim carried
    /// (`i64::MAX`: none): the next claim looks from there too (see `harel_claim`).
    pub claim_hint: AtomicI64,
    /// The earliest time a group this lane parked (retry, snooze) becomes claimable: the
    /// fetcher wakes then rather than at the next poll.
    next_due: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Lane {
    /// A lane for `queue` running `concurrency` handlers, claiming ahead by up to two
    /// claim batches (of `claim_batch`, or the concurrency, whichever is more, and no more
    /// than the handlers finish in [`PREFETCH_WINDOW`]) while handlers are fast: room for
    /// a full batch while the last one still waits for slots, so that claims stay full (a
    /// pool of 16 drained 100,000 no-op jobs about 30% faster than with one batch of room,
    /// whose claims shrank to what had ended since the last).
    pub fn new(queue: String, concurrency: usize, claim_batch: usize) -> Self {
        let prefetch_limit = concurrency + 2 * concurrency.max(claim_batch);
        Self {
            queue: Arc::from(queue),
            concurrency,
            prefetch_limit,
            slots: Arc::new(Semaphore::new(concurrency)),
            claims: Arc::new(Semaphore::new(prefetch_limit)),
            job_ended: Notify::new(),
            handler_micros: AtomicU64::new(u64::MAX),
            wake: Notify::new(),
            claim_hint: AtomicI64::new(i64::MAX),
            next_due: std::sync::Mutex::new(None),
        }
    }

    /// Records a handler's run time in the moving average (weight 1/8).
    pub fn record_run_time(&self, took: Duration) {
        let average = self.handler_micros.load(Ordering::Relaxed);
        self.handler_micros
            .store(next_average(average, took), Ordering::Relaxed);
    }

    /// How many jobs may be claimed and unfinished at once: while handlers are fast, the
    /// concurrency plus what the handlers finish in [`PREFETCH_WINDOW`], up to the prefetch
    /// limit (claims then come in full batches, and a job waits for a slot for a few
    /// milliseconds at most); the concurrency otherwise (a buffered job would hold its
    /// lease for a whole handler run while other workers could run it).
    pub fn claim_limit(&self) -> usize {
        let average = self.handler_micros.load(Ordering::Relaxed);
        if average >= PREFETCH_BELOW.as_micros() as u64 {
            return self.concurrency;
        }
        let window = PREFETCH_WINDOW.as_micros() as u64;
        let finished_in_window = self.concurrency as u64 * window / average.max(1);
        let ahead = usize::try_from(finished_in_window).unwrap_or(usize::MAX);
        self.concurrency + ahead.min(self.prefetch_limit - self.concurrency)
    }

    /// Jobs claimed and not finished.
    pub fn outstanding(&self) -> usize {
        self.prefetch_limit - self.claims.available_permits()
    }

    /// Remembers that a group becomes claimable after `delay`.
    pub fn wake_after(&self, delay: Duration) {
        let due = tokio::time::Instant::now() + delay;
        let mut next = self.next_due.lock().unwrap_or_else(|e| e.into_inner());
        if next.is_none_or(|current| due < current) {
            *next = Some(due);
        }
    }

    /// When the fetcher, finding the queue drained by a claim sent at `claimed_at`, should
    /// look again: after `poll_interval`, or earlier when a group this lane parked becomes
    /// due.
    ///
    /// The due time is kept until it has passed (and a claim has had its chance at the
    /// group), not taken by the first call: the fetcher computes this before it waits, and
    /// a wake-up already pending (an outcome batch's, say) can end that wait at once; had
    /// the call taken the due time, the group would wait for the next poll (an hour, in a
    /// test through PgBouncer on a busy machine, where claims are slow enough for that to
    /// happen 3 runs in 4).
    pub fn next_look(
        &self,
        poll_interval: Duration,
        claimed_at: tokio::time::Instant,
    ) -> tokio::time::Instant {
        let poll = tokio::time::Instant::now() + poll_interval;
        let mut next = self.next_due.lock().unwrap_or_else(|e| e.into_inner());
        match *next {
            // due before the claim that just came back was sent: that claim has looked
            Some(due) if due + DUE_MARGIN <= claimed_at => {
                *next = None;
                poll
            }
            // a little after: the database's clock decides, ours only estimates it
            Some(due) if due <= poll => due + DUE_MARGIN,
            _ => poll,
        }
    }

    /// Passes a NOTIFY's position on to the next claim.
    pub fn hint(&self, position: i64) {
        self.claim_hint.fetch_min(position, Ordering::Relaxed);
    }
}

/// The moving average of run times after one more run, in microseconds (weight 1/8;
/// `u64::MAX` means no run yet).
fn next_average(average: u64, took: Duration) -> u64 {
    let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX / 2);
    if average == u64::MAX {
        took
    } else {
        average - average / 8 + took / 8
    }
}

/// How long after a parked group's estimated due time the fetcher looks for it.
const DUE_MARGIN: Duration = Duration::from_millis(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_time_survives_a_wait_that_a_wake_up_cut_short() {
        let lane = Lane::new("default".to_owned(), 4, 4);
        let hour = Duration::from_secs(3600);
        lane.wake_after(Duration::from_millis(300));
        let soon = tokio::time::Instant::now() + Duration::from_secs(1);
        // the fetcher computes its wait, and a pending wake-up ends it at once: the next
        // wait still ends when the group is due, not at the next poll
        let claimed_at = tokio::time::Instant::now();
        let first = lane.next_look(hour, claimed_at);
        assert!(first < soon);
        assert_eq!(lane.next_look(hour, claimed_at), first);
        std::thread::sleep(Duration::from_millis(310));
        // past it, but the claim that came back was sent before: still due
        assert_eq!(lane.next_look(hour, claimed_at), first);
        // a claim sent since has looked: the poll again
        let claimed_at = tokio::time::Instant::now();
        assert!(lane.next_look(hour, claimed_at) > claimed_at + hour / 2);
    }

    #[test]
    fn fast_handlers_let_a_lane_claim_two_batches_ahead_slow_ones_none() {
        let lane = Lane::new("default".to_owned(), 16, 64);
        assert_eq!(
            lane.claim_limit(),
            16,
            "no run time known yet: no claiming ahead"
        );
        lane.record_run_time(Duration::from_micros(300));
        assert_eq!(lane.claim_limit(), 16 + 2 * 64);
        for _ in 0..40 {
            lane.record_run_time(Duration::from_millis(50));
        }
        assert_eq!(lane.claim_limit(), 16);
        let wide = Lane::new("default".to_owned(), 200, 64);
        wide.record_run_time(Duration::from_micros(300));
        assert_eq!(wide.claim_limit(), 200 + 2 * 200);
    }

    #[test]
    fn handlers_of_a_few_milliseconds_claim_ahead_only_what_they_finish_in_the_window() {
        let lane = Lane::new("default".to_owned(), 16, 256);
        lane.record_run_time(Duration::from_micros(2));
        assert_eq!(
            lane.claim_limit(),
            16 + 2 * 256,
            "no-op handlers: two batches"
        );
        let lane = Lane::new("default".to_owned(), 16, 256);
        lane.record_run_time(Duration::from_millis(4));
        // 16 handlers of 4 ms finish 80 jobs in 20 ms
        assert_eq!(lane.claim_limit(), 16 + 80);
        let lane = Lane::new("default".to_owned(), 16, 256);
        lane.record_run_time(Duration::from_millis(1));
        assert_eq!(lane.claim_limit(), 16 + 320);
    }

    #[test]
    fn the_run_time_average_follows_recent_runs() {
        let first = next_average(u64::MAX, Duration::from_millis(40));
        assert_eq!(first, 40_000);
        let mut average = first;
        for _ in 0..40 {
            average = next_average(average, Duration::from_micros(200));
        }
        assert!(average < PREFETCH_BELOW.as_micros() as u64, "{average}");
        for _ in 0..10 {
            average = next_average(average, Duration::from_millis(50));
        }
        assert!(average > PREFETCH_BELOW.as_micros() as u64, "{average}");
    }
}
