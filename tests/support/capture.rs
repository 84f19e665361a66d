//! Capturing what the code under test logs (events, spans, PostgreSQL notices reported by
//! sqlx) with a subscriber scoped to the test's thread, without losing events to what other
//! tests do meanwhile.
//!
//! `tracing::subscriber::set_default` alone is not enough in a test binary whose tests run
//! in parallel. tracing caches, per call site, whether any subscriber is interested; while
//! exactly one subscriber is registered in the process, the first thread to reach a call
//! site decides from *its own* default subscriber. A test thread that has none (or a
//! cleanup thread dropping another test's schema, whose `DROP SCHEMA … CASCADE` sends a
//! notice) caches "never" for the call site, and from then on the capturing test's events
//! at that site are dropped before its subscriber sees them (tokio-rs/tracing#3611, open
//! for tracing-core 0.1.36). `a_held_snapshot_does_not_slow_the_claim` lost every
//! auto_explain notice that way whenever `a_lease_ends_exactly_…` dropped its schema first.
//! With a second subscriber registered for the whole process, tracing takes its general
//! path and asks every registered subscriber, so the capture sees its events.

use std::sync::OnceLock;

use tracing::Dispatch;
use tracing::subscriber::{DefaultGuard, NoSubscriber, Subscriber};

/// A subscriber that stays registered for the life of the process and takes nothing:
/// with it, no subscriber is ever the only registered one (see the module's docs).
static BYSTANDER: OnceLock<Dispatch> = OnceLock::new();

/// Sets `subscriber` as this thread's default until the guard is dropped, as
/// `tracing::subscriber::set_default` does, so that it receives every event of this thread
/// whatever other threads did first.
pub fn set_default<S>(subscriber: S) -> DefaultGuard
where
    S: Subscriber + Send + Sync + 'static,
{
    // registered before the capture, so that the capture is never the only subscriber
    BYSTANDER.get_or_init(|| Dispatch::new(NoSubscriber::default()));
    tracing::subscriber::set_default(subscriber)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::{Context, SubscriberExt};

    /// Counts the events of the target `capture_test` it sees.
    #[derive(Clone, Default)]
    struct Count(Arc<Mutex<u32>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            if event.metadata().target() == "capture_test" {
                *self.0.lock().unwrap() += 1;
            }
        }
    }

    /// One call site, reached first by a thread without a subscriber, then by the
    /// capturing one (the order of the lost auto_explain notices).
    fn emit() {
        tracing::info!(target: "capture_test", "an event");
    }

    // The only test of this binary that registers a subscriber: with
    // `tracing::subscriber::set_default` in place of `super::set_default`, it is the one
    // registered subscriber, and the event is lost.
    #[test]
    fn an_event_reaches_the_capture_after_a_thread_without_a_subscriber_reached_its_call_site() {
        let count = Count::default();
        let _capture = super::set_default(tracing_subscriber::registry().with(count.clone()));
        std::thread::spawn(emit).join().unwrap();
        emit();
        assert_eq!(*count.0.lock().unwrap(), 1, "the capture lost the event");
    }
}
