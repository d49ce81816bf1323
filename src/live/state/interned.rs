//! One shared copy of each node, service and job name the pods refer to.
//!
//! A decision reads every pod's node and owner names; with a copy per pod those are 150,000
//! scattered strings at 5,000 nodes, each a cache miss. Shared, they are a few thousand
//! (`core::SharedName`; `benches/live_state.rs` times a decision at that size).

use std::collections::HashSet;

use crate::core::SharedName;

#[derive(Debug, Default)]
pub struct Names {
    shared: HashSet<SharedName>,
    /// Size after the last sweep: the next one comes when the set has doubled since.
    swept_at: usize,
}

impl Names {
    /// The shared copy of `name`.
    pub fn get(&mut self, name: &str) -> SharedName {
        if let Some(n) = self.shared.get(name) {
            return n.clone();
        }
        if self.shared.len() >= 2 * self.swept_at.max(512) {
            // Names no pod holds any more (nodes removed, jobs finished) go; the sweep costs a
            // pass over the set each time it doubles, so nothing grows without bound.
            self.shared.retain(|n| std::sync::Arc::strong_count(n) > 1);
            self.swept_at = self.shared.len();
        }
        let n: SharedName = name.into();
        self.shared.insert(n.clone());
        n
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shared.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_same_name_is_one_copy_and_names_no_one_holds_are_swept() {
        let mut names = Names::default();
        let a = names.get("node-1");
        let b = names.get("node-1");
        assert!(Arc::ptr_eq(&a, &b), "one copy");
        assert_eq!(&*a, "node-1");
        drop(b);
        // 2,000 names nobody keeps: the set is swept as it doubles past 512 and stays bounded.
        for i in 0..2_000 {
            names.get(&format!("gone-{i}"));
        }
        assert!(names.len() < 1_100, "{} names kept", names.len());
        assert!(Arc::ptr_eq(&a, &names.get("node-1")), "a name still held survives the sweeps");
    }
}
