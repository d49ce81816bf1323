//! Maps keyed by names (nodes, services, jobs) for the lookups a decision makes once per pod.
//! They hash eight bytes at a time with the multiply-rotate step of rustc's FxHash, finished
//! with MurmurHash3's mixer, instead of the standard library's SipHash: profiled at 30,000
//! pods, SipHash takes an eighth of a decision, and FNV-1a, one byte at a time, still a tenth
//! at 150,000 (`benches/live_state.rs` times a decision at both sizes). SipHash guards against
//! keys chosen to collide; here the keys are the cluster's nodes, services and jobs, a few
//! thousand at most, looked up by the pods that name them (or the addresses of their shared
//! copies, `core::pod_index`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from names (or small indexes, or addresses) hashed with [`NameHasher`].
pub type NameMap<K, V> = HashMap<K, V, BuildHasherDefault<NameHasher>>;

/// FxHash's step (each word mixed in by a rotate, an xor and a multiply by an odd constant), with
/// MurmurHash3's finalizer.
#[derive(Clone, Copy, Debug, Default)]
pub struct NameHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl NameHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for NameHasher {
    /// The multiplies leave their entropy in the high bits, and the table picks buckets by the
    /// low ones: MurmurHash3's 64-bit finalizer spreads every bit over all of them (a rotation
    /// alone left 5,000 node names in a quarter of 4,096 buckets; the test below).
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().expect("eight bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            // The length keeps "a" and "a\0" apart.
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn names_that_differ_anywhere_hash_apart_and_a_map_finds_its_keys() {
        let built = BuildHasherDefault::<NameHasher>::default();
        // Differences in the first word, the last partial word, and the length only.
        for (a, b) in [("node-1", "node-2"), ("node-100000", "node-100001"), ("a", "a\0"), ("", "\0")] {
            assert_ne!(built.hash_one(a), built.hash_one(b), "{a:?} vs {b:?}");
        }
        let names: Vec<String> = (0..5000).map(|i| format!("node-{i}")).collect();
        let map: NameMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        assert!(names.iter().enumerate().all(|(i, n)| map.get(n.as_str()) == Some(&i)));
        // The low bits pick the bucket: sequential names must spread over them, not collide.
        let low: HashSet<u64> = names.iter().map(|n| built.hash_one(n.as_str()) & 0xfff).collect();
        assert!(low.len() > 2_500, "5,000 names fill only {} of 4,096 low-bit buckets", low.len());
    }
}
