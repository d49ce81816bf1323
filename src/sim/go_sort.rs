//! Go's `sort.Slice`, step for step: the pattern-defeating quicksort of Go's `sort` package
//! (`src/sort/zsortfunc.go`, the same since Go 1.19; read in go1.26.8), which kube-scheduler's
//! `SelectVictimsOnNode` uses to rank a node's preemption candidates. It is not stable above 12
//! elements, so which of several equally important workers it puts last (the one preemption
//! takes first) depends on the algorithm's swaps, not only on the order it was given; replay
//! must make the same swaps to pick the same victims. `tests/go_sort_parity.rs` checks the port
//! against Go itself.

/// Sorts `data` as Go's `sort.Slice(data, less)` does, equal elements included.
pub fn sort_slice<T>(data: &mut [T], less: impl Fn(&T, &T) -> bool) {
    let limit = usize::BITS - data.len().leading_zeros();
    let mut s = Sorter { data, less };
    let n = s.data.len();
    s.pdqsort(0, n, limit);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Hint {
    Unknown,
    Increasing,
    Decreasing,
}

struct Sorter<'a, T, L> {
    data: &'a mut [T],
    less: L,
}

impl<T, L: Fn(&T, &T) -> bool> Sorter<'_, T, L> {
    fn less(&self, i: usize, j: usize) -> bool {
        (self.less)(&self.data[i], &self.data[j])
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.data.swap(i, j);
    }

    fn insertion_sort(&mut self, a: usize, b: usize) {
        for i in a + 1..b {
            let mut j = i;
            while j > a && self.less(j, j - 1) {
                self.swap(j, j - 1);
                j -= 1;
            }
        }
    }

    fn sift_down(&mut self, lo: usize, hi: usize, first: usize) {
        let mut root = lo;
        loop {
            let mut child = 2 * root + 1;
            if child >= hi {
                return;
            }
            if child + 1 < hi && self.less(first + child, first + child + 1) {
                child += 1;
            }
            if !self.less(first + root, first + child) {
                return;
            }
            self.swap(first + root, first + child);
            root = child;
        }
    }

    fn heap_sort(&mut self, a: usize, b: usize) {
        let first = a;
        let hi = b - a;
        // Only ever called on more than 12 elements, so `hi - 1` does not wrap.
        for i in (0..=(hi - 1) / 2).rev() {
            self.sift_down(i, hi, first);
        }
        for i in (0..hi).rev() {
            self.swap(first, first + i);
            self.sift_down(0, i, first);
        }
    }

    fn pdqsort(&mut self, mut a: usize, mut b: usize, mut limit: u32) {
        const MAX_INSERTION: usize = 12;
        let mut was_balanced = true;
        let mut was_partitioned = true;
        loop {
            let length = b - a;
            if length <= MAX_INSERTION {
                self.insertion_sort(a, b);
                return;
            }
            if limit == 0 {
                self.heap_sort(a, b);
                return;
            }
            if !was_balanced {
                self.break_patterns(a, b);
                limit -= 1;
            }
            let (mut pivot, mut hint) = self.choose_pivot(a, b);
            if hint == Hint::Decreasing {
                self.reverse_range(a, b);
                pivot = (b - 1) - (pivot - a);
                hint = Hint::Increasing;
            }
            if was_balanced && was_partitioned && hint == Hint::Increasing && self.partial_insertion_sort(a, b) {
                return;
            }
            if a > 0 && !self.less(a - 1, pivot) {
                a = self.partition_equal(a, b, pivot);
                continue;
            }
            let (mid, already_partitioned) = self.partition(a, b, pivot);
            was_partitioned = already_partitioned;
            let (left_len, right_len) = (mid - a, b - mid);
            let balance_threshold = length / 8;
            if left_len < right_len {
                was_balanced = left_len >= balance_threshold;
                self.pdqsort(a, mid, limit);
                a = mid + 1;
            } else {
                was_balanced = right_len >= balance_threshold;
                self.pdqsort(mid + 1, b, limit);
                b = mid;
            }
        }
    }

    /// Go's indices `i` and `j` are inclusive and `j` may pass below `i`; signed here as there.
    fn partition(&mut self, a: usize, b: usize, pivot: usize) -> (usize, bool) {
        self.swap(a, pivot);
        let (mut i, mut j) = (a as isize + 1, b as isize - 1);
        while i <= j && self.less(i as usize, a) {
            i += 1;
        }
        while i <= j && !self.less(j as usize, a) {
            j -= 1;
        }
        if i > j {
            self.swap(j as usize, a);
            return (j as usize, true);
        }
        self.swap(i as usize, j as usize);
        i += 1;
        j -= 1;
        loop {
            while i <= j && self.less(i as usize, a) {
                i += 1;
            }
            while i <= j && !self.less(j as usize, a) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(i as usize, j as usize);
            i += 1;
            j -= 1;
        }
        self.swap(j as usize, a);
        (j as usize, false)
    }

    fn partition_equal(&mut self, a: usize, b: usize, pivot: usize) -> usize {
        self.swap(a, pivot);
        let (mut i, mut j) = (a as isize + 1, b as isize - 1);
        loop {
            while i <= j && !self.less(a, i as usize) {
                i += 1;
            }
            while i <= j && self.less(a, j as usize) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(i as usize, j as usize);
            i += 1;
            j -= 1;
        }
        i as usize
    }

    fn partial_insertion_sort(&mut self, a: usize, b: usize) -> bool {
        const MAX_STEPS: usize = 5;
        const SHORTEST_SHIFTING: usize = 50;
        let mut i = a + 1;
        for _ in 0..MAX_STEPS {
            while i < b && !self.less(i, i - 1) {
                i += 1;
            }
            if i == b {
                return true;
            }
            if b - a < SHORTEST_SHIFTING {
                return false;
            }
            self.swap(i, i - 1);
            // Go's inner loops run down to index 1 and up to `b` whatever `a` is.
            if i - a >= 2 {
                let mut j = i - 1;
                while j >= 1 {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j -= 1;
                }
            }
            if b - i >= 2 {
                for j in i + 1..b {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                }
            }
        }
        false
    }

    fn break_patterns(&mut self, a: usize, b: usize) {
        let length = b - a;
        if length >= 8 {
            let mut random = length as u64;
            let modulus = 1usize << (usize::BITS - length.leading_zeros());
            let mid = a + (length / 4) * 2;
            for idx in mid - 1..=mid + 1 {
                random ^= random << 13;
                random ^= random >> 7;
                random ^= random << 17;
                let mut other = (random as usize) & (modulus - 1);
                if other >= length {
                    other -= length;
                }
                self.swap(idx, a + other);
            }
        }
    }

    fn choose_pivot(&mut self, a: usize, b: usize) -> (usize, Hint) {
        const SHORTEST_NINTHER: usize = 50;
        const MAX_SWAPS: u32 = 4 * 3;
        let l = b - a;
        let mut swaps = 0;
        let (mut i, mut j, mut k) = (a + l / 4, a + l / 4 * 2, a + l / 4 * 3);
        if l >= 8 {
            if l >= SHORTEST_NINTHER {
                i = self.median(i - 1, i, i + 1, &mut swaps);
                j = self.median(j - 1, j, j + 1, &mut swaps);
                k = self.median(k - 1, k, k + 1, &mut swaps);
            }
            j = self.median(i, j, k, &mut swaps);
        }
        match swaps {
            0 => (j, Hint::Increasing),
            MAX_SWAPS => (j, Hint::Decreasing),
            _ => (j, Hint::Unknown),
        }
    }

    fn order2(&self, a: usize, b: usize, swaps: &mut u32) -> (usize, usize) {
        if self.less(b, a) {
            *swaps += 1;
            (b, a)
        } else {
            (a, b)
        }
    }

    fn median(&self, a: usize, b: usize, c: usize, swaps: &mut u32) -> usize {
        let (a, b) = self.order2(a, b, swaps);
        let (b, _) = self.order2(b, c, swaps);
        self.order2(a, b, swaps).1
    }

    fn reverse_range(&mut self, a: usize, b: usize) {
        let (mut i, mut j) = (a, b - 1);
        while i < j {
            self.swap(i, j);
            i += 1;
            j -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sort_slice;

    /// A small deterministic generator, so the cases are the same on every run.
    fn values(seed: u64, n: usize, distinct: u64) -> Vec<(u64, usize)> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % distinct, i)
            })
            .collect()
    }

    #[test]
    fn sorts_every_shape_it_is_given() {
        for n in [0, 1, 2, 7, 12, 13, 30, 49, 50, 51, 200, 1000] {
            for distinct in [1, 2, 3, 10, 1_000_000] {
                for seed in 0..5 {
                    let mut v = values(seed, n, distinct);
                    sort_slice(&mut v, |a, b| a.0 < b.0);
                    assert!(v.windows(2).all(|w| w[0].0 <= w[1].0), "n {n} distinct {distinct} seed {seed}");
                    let mut ids: Vec<usize> = v.iter().map(|x| x.1).collect();
                    ids.sort_unstable();
                    assert_eq!(ids, (0..n).collect::<Vec<_>>(), "a permutation");
                }
                let mut up: Vec<(u64, usize)> = (0..n).map(|i| (i as u64 % distinct.max(1), i)).collect();
                up.sort_by_key(|x| x.0);
                let mut down = up.clone();
                down.reverse();
                sort_slice(&mut down, |a, b| a.0 < b.0);
                assert!(down.windows(2).all(|w| w[0].0 <= w[1].0), "reversed, n {n}");
            }
        }
    }

    #[test]
    fn up_to_twelve_equal_elements_keep_their_order_and_more_do_not() {
        // Insertion sort below 13 elements: stable, as kube-scheduler's ties then are.
        let mut v: Vec<(u64, usize)> = (0..12).map(|i| (0, i)).collect();
        sort_slice(&mut v, |a, b| a.0 < b.0);
        assert_eq!(v.iter().map(|x| x.1).collect::<Vec<_>>(), (0..12).collect::<Vec<_>>());
        // Above it the pivot moves: equal elements leave their places.
        let mut v: Vec<(u64, usize)> = (0..20).map(|i| (u64::from(i % 5 == 0), i)).collect();
        sort_slice(&mut v, |a, b| a.0 < b.0);
        let zeros: Vec<usize> = v.iter().filter(|x| x.0 == 0).map(|x| x.1).collect();
        let mut kept = zeros.clone();
        kept.sort_unstable();
        assert_ne!(zeros, kept, "pdqsort is not stable above 12 elements");
    }
}
