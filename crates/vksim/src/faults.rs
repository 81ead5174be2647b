//! Fault knobs for tests, per VM name. [`Faults`] is a cheap clone handle onto one shared
//! table; workers read a [`FaultSet`] copy before every step, so a fault set between two steps
//! of one transition takes effect at the next step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// The faults armed for one VM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FaultSet {
    /// Ignore the VM: events are queued, nothing is acted on until the stall is cleared.
    pub stalled: bool,
    /// One-shot: the next hibernation fails after the push, with this message.
    pub fail_next_hibernate: Option<String>,
    /// Every create (fresh, restore or wake) fails with this message until cleared.
    pub fail_create: Option<String>,
}

/// Handle to the simulator's fault table (clone freely).
#[derive(Clone, Debug)]
pub struct Faults {
    table: Arc<Mutex<HashMap<String, FaultSet>>>,
    kick: mpsc::UnboundedSender<String>,
}

impl Faults {
    pub(crate) fn new(kick: mpsc::UnboundedSender<String>) -> Self {
        Faults {
            table: Arc::default(),
            kick,
        }
    }

    /// Ignores `vm` entirely: no lifecycle writes, no registry calls, not even for deletes.
    /// Events keep arriving and are acted on (latest state first) once [`Faults::clear`]ed.
    pub fn stall(&self, vm: &str) {
        self.edit(vm, |f| f.stalled = true);
    }

    /// Makes the next hibernation of `vm` fail like vk-cocoon does when removing the VM fails:
    /// `hibernating`, the push, then the pushed `:hibernate` tag is deleted again, the VM stays
    /// live (id/ip kept) and the lifecycle becomes `failed` with `message`. One-shot.
    pub fn fail_next_hibernate(&self, vm: &str, message: impl Into<String>) {
        let message = message.into();
        self.edit(vm, |f| f.fail_next_hibernate = Some(message));
    }

    /// Makes every VM creation for `vm` (fresh boot, restore, wake) end in lifecycle `failed`
    /// with `message`, until cleared.
    pub fn fail_create(&self, vm: &str, message: impl Into<String>) {
        let message = message.into();
        self.edit(vm, |f| f.fail_create = Some(message));
    }

    /// Clears every fault of `vm` and has the simulator look at its pods again. A `failed`
    /// lifecycle stays (it is sticky for its generation, as in vk-cocoon) until the pod's
    /// generation stamp changes.
    pub fn clear(&self, vm: &str) {
        self.table.lock().expect("faults lock").remove(vm);
        // The simulator may be stopped; then nothing needs a kick.
        let _ = self.kick.send(vm.to_owned());
    }

    /// The faults armed for `vm` now.
    pub(crate) fn get(&self, vm: &str) -> FaultSet {
        let table = self.table.lock().expect("faults lock");
        table.get(vm).cloned().unwrap_or_default()
    }

    /// Disarms the one-shot hibernation fault of `vm` once it fired.
    pub(crate) fn consume_hibernate(&self, vm: &str) {
        if let Some(f) = self.table.lock().expect("faults lock").get_mut(vm) {
            f.fail_next_hibernate = None;
        }
    }

    fn edit(&self, vm: &str, f: impl FnOnce(&mut FaultSet)) {
        f(self
            .table
            .lock()
            .expect("faults lock")
            .entry(vm.to_owned())
            .or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_per_vm_and_clear_kicks() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let faults = Faults::new(tx);
        faults.stall("a");
        faults.fail_next_hibernate("b", "boom");
        assert!(faults.get("a").stalled);
        assert_eq!(faults.get("b").fail_next_hibernate.as_deref(), Some("boom"));
        assert_eq!(faults.get("c"), FaultSet::default());
        faults.consume_hibernate("b");
        assert_eq!(faults.get("b").fail_next_hibernate, None);
        faults.clear("a");
        assert_eq!(faults.get("a"), FaultSet::default());
        assert_eq!(rx.try_recv().ok().as_deref(), Some("a"));
    }
}
