//! Backoff between attempts.

use std::time::Duration;

/// The delay between a failed attempt and the next one: exponential, capped, with jitter.
///
/// For attempt `n` (the attempt that just failed, from 1) the nominal delay is
/// `d = min(max, base × 2^(n−1))`, and the actual delay is uniformly random in `[¾·d, d]`,
/// so that jobs failing together do not retry together. The default is 2 s doubling up to
/// 1 h: 2 s, 4 s, 8 s, … 1,024 s, 2,048 s, then 3,600 s.
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60));
/// assert_eq!(backoff.nominal(1), Duration::from_secs(1));
/// assert_eq!(backoff.nominal(3), Duration::from_secs(4));
/// assert_eq!(backoff.nominal(30), Duration::from_secs(60));
/// let actual = backoff.delay(3, 0.5);
/// assert!(actual >= Duration::from_secs(3) && actual <= Duration::from_secs(4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// 2 s doubling up to 1 h.
    pub const DEFAULT: Backoff =
        Backoff::exponential(Duration::from_secs(2), Duration::from_secs(3600));

    /// `base` doubling after each failed attempt, never more than `max`.
    pub const fn exponential(base: Duration, max: Duration) -> Self {
        Self { base, max }
    }

    /// The same delay after every failed attempt (jitter still applies).
    pub const fn fixed(delay: Duration) -> Self {
        Self {
            base: delay,
            max: delay,
        }
    }

    /// The first delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The cap.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The delay before jitter after failed attempt `attempt` (from 1).
    pub fn nominal(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(62);
        let factor = 1u64 << doublings;
        let nanos = self.base.as_nanos().saturating_mul(u128::from(factor));
        let capped = nanos.min(self.max.as_nanos().max(self.base.as_nanos()));
        Duration::from_nanos(u64::try_from(capped).unwrap_or(u64::MAX))
    }

    /// The delay after failed attempt `attempt`, with `random` in `[0, 1)` choosing the
    /// point in `[¾·d, d]` (see the type's documentation).
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let nominal = self.nominal(attempt);
        let random = if random.is_finite() {
            random.clamp(0.0, 1.0)
        } else {
            0.0
        };
        nominal.mul_f64(0.75 + 0.25 * random)
    }

    /// [`delay`](Self::delay) with a random draw.
    pub fn delay_random(&self, attempt: u32) -> Duration {
        self.delay(attempt, rand::random::<f64>())
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_doubles_from_two_seconds_to_an_hour() {
        let b = Backoff::DEFAULT;
        let secs: Vec<u64> = (1..=13).map(|n| b.nominal(n).as_secs()).collect();
        assert_eq!(
            secs,
            [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600]
        );
        assert_eq!(b.nominal(u32::MAX), Duration::from_secs(3600));
        assert_eq!(b.nominal(0), Duration::from_secs(2));
    }

    #[test]
    fn jitter_stays_in_the_upper_quarter() {
        let b = Backoff::DEFAULT;
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(1500));
        assert_eq!(b.delay(1, 1.0), Duration::from_secs(2));
        assert_eq!(b.delay(2, 0.5), Duration::from_millis(3500));
        assert_eq!(b.delay(1, f64::NAN), Duration::from_millis(1500));
        for _ in 0..1000 {
            let d = b.delay_random(3);
            assert!(d >= Duration::from_secs(6) && d <= Duration::from_secs(8));
        }
    }

    #[test]
    fn fixed_is_flat() {
        let b = Backoff::fixed(Duration::from_secs(5));
        assert_eq!(b.nominal(1), b.nominal(10));
    }
}
