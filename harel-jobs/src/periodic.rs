//! Periodic jobs: [`Periodic`] (a named schedule: a cron expression in a time zone, or a
//! fixed interval) and [`MissedTicks`] (what happens to ticks no worker was running for).
//!
//! A schedule's ticks are times every worker computes alike (a cron expression's matches,
//! or multiples of an interval since the Unix epoch), so the tick itself identifies the job
//! to enqueue: the database enqueues one job per (schedule, tick) however many workers
//! declare the schedule (`harel_schedule_fire`), without a leader.

use std::str::FromStr as _;
use std::time::Duration;

use chrono::{DateTime, SubsecRound as _, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::error::ConfigError;
use crate::vocabulary::{MAX_CATCH_UP, MAX_SCHEDULE_NAME_BYTES};

/// A named schedule for a periodic job, given to
/// [`WorkerBuilder::periodic`](crate::WorkerBuilder::periodic).
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::{MissedTicks, Periodic};
///
/// // 03:00 every day, Paris time (5 fields; 6 with seconds first)
/// let nightly = Periodic::cron("nightly-report", "0 3 * * *")?.time_zone("Europe/Paris")?;
/// // every 10 minutes, on the minute (00:00, 00:10, …: multiples of the interval since
/// // the Unix epoch), catching up on at most 3 missed ticks after an outage
/// let sync = Periodic::every("partner-sync", Duration::from_secs(600))?
///     .missed(MissedTicks::All { at_most: 3 });
/// # Ok::<(), harel_jobs::ConfigError>(())
/// ```
///
/// The name identifies the schedule in the database: renaming it makes a new schedule
/// (whose first tick is the next one to come), and a schedule no worker declares any more
/// simply stops.
#[derive(Clone, Debug)]
pub struct Periodic {
    name: String,
    every: Every,
    missed: MissedTicks,
}

#[derive(Clone, Debug)]
enum Every {
    Cron {
        cron: Box<Cron>,
        text: String,
        zone: Tz,
    },
    Interval(Duration),
}

/// What a worker does, when it starts, about the ticks of a schedule that passed while no
/// worker ran it (counted from the last tick any worker enqueued). A schedule seen for the
/// first time has no missed ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissedTicks {
    /// Enqueue none of them: the next tick is the next one to come.
    Skip,
    /// Enqueue the most recent one (the default): "the nightly report ran late".
    #[default]
    Last,
    /// Enqueue each of them, oldest first, but at most the `at_most` most recent ones
    /// (at most [`MAX_CATCH_UP`]).
    All {
        /// How many of the missed ticks to enqueue at most.
        at_most: u32,
    },
}

impl Periodic {
    /// A schedule by cron expression, in UTC (see [`time_zone`](Self::time_zone)): 5
    /// fields (minute, hour, day of month, month, day of week), or 6 with seconds first;
    /// names (`MON`, `JAN`), ranges, steps and lists, as [croner] reads them.
    ///
    /// # Errors
    /// [`ConfigError::InvalidSchedule`] for an empty or too long name, or an expression
    /// that does not parse.
    pub fn cron(name: impl Into<String>, expression: &str) -> Result<Self, ConfigError> {
        let name = valid_name(name.into())?;
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(expression)
            .map_err(|error| ConfigError::InvalidSchedule {
                name: name.clone(),
                reason: format!("cron expression {expression:?}: {error}"),
            })?;
        Ok(Self {
            name,
            every: Every::Cron {
                cron: Box::new(cron),
                text: expression.trim().to_owned(),
                zone: Tz::UTC,
            },
            missed: MissedTicks::default(),
        })
    }

    /// A schedule every `interval` (1 s to 366 days), ticking at the multiples of it since
    /// the Unix epoch (so every worker agrees on the ticks, and an hourly schedule ticks on
    /// the hour).
    ///
    /// # Errors
    /// [`ConfigError::InvalidSchedule`] for an empty or too long name, or an interval out
    /// of range.
    pub fn every(name: impl Into<String>, interval: Duration) -> Result<Self, ConfigError> {
        let name = valid_name(name.into())?;
        if interval < Duration::from_secs(1) || interval > Duration::from_secs(366 * 24 * 3600) {
            return Err(ConfigError::InvalidSchedule {
                name,
                reason: "an interval is 1 s to 366 days".to_owned(),
            });
        }
        Ok(Self {
            name,
            every: Every::Interval(interval),
            missed: MissedTicks::default(),
        })
    }

    /// Reads a cron expression in this IANA time zone (`"Europe/Paris"`): "03:00" is
    /// 03:00 there, daylight saving time included. No effect on an interval.
    ///
    /// # Errors
    /// [`ConfigError::InvalidSchedule`] for a name the time zone database does not know.
    pub fn time_zone(mut self, zone: &str) -> Result<Self, ConfigError> {
        let parsed = Tz::from_str(zone).map_err(|_| ConfigError::InvalidSchedule {
            name: self.name.clone(),
            reason: format!("unknown time zone {zone:?}"),
        })?;
        if let Every::Cron { zone, .. } = &mut self.every {
            *zone = parsed;
        }
        Ok(self)
    }

    /// What to do about ticks missed while no worker ran (default [`MissedTicks::Last`]).
    pub fn missed(mut self, policy: MissedTicks) -> Self {
        self.missed = match policy {
            MissedTicks::All { at_most } => MissedTicks::All {
                at_most: at_most.min(MAX_CATCH_UP),
            },
            other => other,
        };
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How it is written in the schedules table: the cron expression and its time zone,
    /// or `every <n>s`.
    pub fn spec(&self) -> String {
        match &self.every {
            Every::Cron { text, zone, .. } => format!("cron {text} ({zone})"),
            Every::Interval(interval) => format!("every {}s", interval.as_secs()),
        }
    }

    /// The first tick strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.every {
            // whole seconds in and out: croner keeps a fraction it is given, and every worker
            // must compute the same ticks
            Every::Cron { cron, zone, .. } => cron
                .find_next_occurrence(&after.trunc_subsecs(0).with_timezone(zone), false)
                .ok()
                .map(|tick| tick.with_timezone(&Utc).trunc_subsecs(0)),
            Every::Interval(interval) => {
                let step = i64::try_from(interval.as_millis()).ok()?;
                let next = (after.timestamp_millis().div_euclid(step) + 1).checked_mul(step)?;
                DateTime::from_timestamp_millis(next)
            }
        }
    }

    /// The last tick at or before `at`.
    fn at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.every {
            Every::Cron { cron, zone, .. } => cron
                .find_previous_occurrence(&at.trunc_subsecs(0).with_timezone(zone), true)
                .ok()
                .map(|tick| tick.with_timezone(&Utc).trunc_subsecs(0)),
            Every::Interval(interval) => {
                let step = i64::try_from(interval.as_millis()).ok()?;
                let tick = at.timestamp_millis().div_euclid(step).checked_mul(step)?;
                DateTime::from_timestamp_millis(tick)
            }
        }
    }

    /// The ticks a running worker fires: those after `from` and at or before `now`. Usually
    /// one; when the worker fell behind (the database was unreachable), the most recent
    /// ones the policy keeps, and at least the latest.
    pub(crate) fn live_ticks(&self, from: DateTime<Utc>, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        self.latest(from, now, self.keep().max(1))
    }

    /// How many missed ticks the policy keeps.
    fn keep(&self) -> usize {
        match self.missed {
            MissedTicks::Skip => 0,
            MissedTicks::Last => 1,
            MissedTicks::All { at_most } => at_most as usize,
        }
    }

    /// The ticks to enqueue now: the missed ones the policy keeps, among those after `last`
    /// (the last tick any worker enqueued; `None`: none yet) and at or before `now`, oldest
    /// first. Walks back from `now`, so the work is bounded by what the policy keeps.
    pub(crate) fn due(
        &self,
        last: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        match last {
            Some(last) => self.latest(last, now, self.keep()),
            None => Vec::new(),
        }
    }

    /// The `keep` most recent ticks after `after` and at or before `now`, oldest first.
    fn latest(&self, after: DateTime<Utc>, now: DateTime<Utc>, keep: usize) -> Vec<DateTime<Utc>> {
        let mut ticks = Vec::with_capacity(keep.min(64));
        let mut at = now;
        while ticks.len() < keep {
            match self.at_or_before(at) {
                Some(tick) if tick > after => {
                    ticks.push(tick);
                    at = tick - TimeDelta::milliseconds(1);
                }
                _ => break,
            }
        }
        ticks.reverse();
        ticks
    }
}

fn valid_name(name: String) -> Result<String, ConfigError> {
    if name.is_empty() || name.len() > MAX_SCHEDULE_NAME_BYTES || name.contains('\0') {
        return Err(ConfigError::InvalidSchedule {
            name: name.chars().take(64).collect(),
            reason: format!("a schedule name is 1 to {MAX_SCHEDULE_NAME_BYTES} bytes, without NUL"),
        });
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn intervals_tick_on_multiples_since_the_epoch() {
        let hourly = Periodic::every("h", Duration::from_secs(3600)).unwrap();
        assert_eq!(
            hourly.next_after(at("2026-12-04T10:15:00Z")),
            Some(at("2026-12-04T11:00:00Z"))
        );
        assert_eq!(
            hourly.next_after(at("2026-12-04T11:00:00Z")),
            Some(at("2026-12-04T12:00:00Z")),
            "strictly after"
        );
        assert!(Periodic::every("x", Duration::from_millis(500)).is_err());
        assert!(Periodic::every("", Duration::from_secs(5)).is_err());
    }

    #[test]
    fn cron_reads_five_or_six_fields_in_a_time_zone() {
        let nightly = Periodic::cron("n", "0 3 * * *").unwrap();
        assert_eq!(
            nightly.next_after(at("2026-12-04T10:00:00Z")),
            Some(at("2026-12-05T03:00:00Z"))
        );
        let paris = nightly.clone().time_zone("Europe/Paris").unwrap();
        // 03:00 in Paris in winter is 02:00 UTC
        assert_eq!(
            paris.next_after(at("2026-12-04T10:00:00Z")),
            Some(at("2026-12-05T02:00:00Z"))
        );
        let seconds = Periodic::cron("s", "*/10 * * * * *").unwrap();
        assert_eq!(
            seconds.next_after(at("2026-12-04T10:00:01Z")),
            Some(at("2026-12-04T10:00:10Z"))
        );
        assert!(Periodic::cron("bad", "61 * * * *").is_err());
        assert!(
            Periodic::cron("bad", "0 0 1 1 * 2030").is_err(),
            "no year field"
        );
        assert!(nightly.time_zone("Mars/Olympus").is_err());
        assert_eq!(paris.spec(), "cron 0 3 * * * (Europe/Paris)");
    }

    #[test]
    fn missed_ticks_follow_the_policy() {
        let minutely = Periodic::every("m", Duration::from_secs(60)).unwrap();
        let last = at("2026-12-04T10:00:00Z");
        let now = at("2026-12-04T10:05:30Z");
        assert_eq!(
            minutely.due(None, now),
            Vec::<DateTime<Utc>>::new(),
            "a new schedule has missed nothing"
        );
        assert_eq!(
            minutely
                .clone()
                .missed(MissedTicks::Skip)
                .due(Some(last), now),
            Vec::<DateTime<Utc>>::new()
        );
        assert_eq!(minutely.due(Some(last), now), [at("2026-12-04T10:05:00Z")]);
        let all = minutely.clone().missed(MissedTicks::All { at_most: 3 });
        assert_eq!(
            all.due(Some(last), now),
            [
                at("2026-12-04T10:03:00Z"),
                at("2026-12-04T10:04:00Z"),
                at("2026-12-04T10:05:00Z")
            ]
        );
        assert_eq!(
            all.due(Some(at("2026-12-04T10:05:00Z")), now),
            Vec::<DateTime<Utc>>::new(),
            "nothing missed"
        );
        // a year missed, minutely: bounded work
        let long = all.due(Some(at("2025-12-04T10:00:00Z")), now);
        assert_eq!(long.len(), 3);
        // a running worker fires the tick that came, whatever the policy; when it fell
        // behind, the most recent ones (at least one)
        let skip = minutely.clone().missed(MissedTicks::Skip);
        assert_eq!(
            skip.live_ticks(at("2026-12-04T10:04:00Z"), now),
            [at("2026-12-04T10:05:00Z")]
        );
        assert_eq!(
            skip.live_ticks(at("2026-12-04T10:05:00Z"), now),
            Vec::<DateTime<Utc>>::new()
        );
        assert_eq!(all.live_ticks(last, now).len(), 3);
        let cron = Periodic::cron("c", "* * * * *")
            .unwrap()
            .missed(MissedTicks::All { at_most: 2 });
        assert_eq!(
            cron.due(Some(last), now),
            [at("2026-12-04T10:04:00Z"), at("2026-12-04T10:05:00Z")]
        );
    }
}
