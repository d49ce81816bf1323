//! Maps keyed by names (nodes, services, jobs) for the lookups a decision makes once per pod.
//! They hash with FNV-1a instead of the standard library's SipHash: at 30,000 pods SipHash was
//! an eighth of a decision (`docs/scale.md`). SipHash guards against keys chosen to collide;
//! here the keys are the cluster's nodes, services and jobs, a few thousand at most, looked up by
//! the pods that name them.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from names (or small indexes) hashed with [`Fnv1a`].
pub type NameMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv1a>>;

/// 64-bit FNV-1a.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn the_published_fnv1a_values_and_a_map_that_finds_its_keys() {
        let hash = |bytes: &[u8]| {
            let mut h = Fnv1a::default();
            h.write(bytes);
            h.finish()
        };
        // Test vectors of the FNV reference (draft-eastlake-fnv): "" and "a".
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        let built = BuildHasherDefault::<Fnv1a>::default();
        assert_ne!(built.hash_one("node-1"), built.hash_one("node-2"));
        let names: Vec<String> = (0..1000).map(|i| format!("node-{i}")).collect();
        let map: NameMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        assert!(names.iter().enumerate().all(|(i, n)| map.get(n.as_str()) == Some(&i)));
    }
}
