//! Faults injected on purpose into the pool's background tasks, for the test suite only.
//!
//! Compiled in by the hidden `__fault_injection` feature, which only the test suite enables.
//! Without it, [`Faults`] is empty and [`Faults::check`] is `Ok(())`, which the compiler
//! removes: there is no cost when it is off.

use super::task::{TaskResult, WorkerTask};

/// What an injected fault does to its task.
#[cfg(feature = "__fault_injection")]
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InjectedFault {
    /// The task panics.
    Panic,
    /// The task ends with an error.
    Error,
}

/// The faults planned for one pool: none unless the feature is on and a test asked for some.
#[derive(Default)]
pub(crate) struct Faults {
    #[cfg(feature = "__fault_injection")]
    planned: Vec<(WorkerTask, InjectedFault)>,
}

impl Faults {
    /// Makes `task` fail with `fault` at its next step.
    #[cfg(feature = "__fault_injection")]
    pub fn plan(&mut self, task: WorkerTask, fault: InjectedFault) {
        self.planned.push((task, fault));
    }

    /// Called by `task` at each step (a claim, a batch of outcomes, a heartbeat, a LISTEN
    /// connection, a maintenance check): fails it if a fault is planned for it.
    #[inline(always)]
    pub fn check(&self, task: WorkerTask) -> TaskResult {
        #[cfg(feature = "__fault_injection")]
        if let Some(&(_, fault)) = self.planned.iter().find(|(planned, _)| *planned == task) {
            match fault {
                InjectedFault::Panic => panic!("fault injected into the {task}"),
                InjectedFault::Error => return Err(format!("fault injected into the {task}")),
            }
        }
        let _ = task;
        Ok(())
    }
}
