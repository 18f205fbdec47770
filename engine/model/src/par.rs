//! Splitting independent work over a few threads, with the results in input
//! order, so that a parallel step gives exactly what the sequential one gives.
//!
//! Used where one large step dominates: a checkpoint restore converting 100k
//! entities, a full regeneration encoding every resource. The threads are
//! rayon's pool (`RAYON_NUM_THREADS`, default one per core), not tokio's
//! workers, so a large step never takes a thread an xDS stream needs. The engine
//! stays pure: borrowed data, joined before returning.
//!
//! What it does NOT do: split small inputs (below `min` items everything runs
//! on the calling thread; handing work to the pool costs more than they do).

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rayon::prelude::*;

/// A chunk whose `f` panicked: its length and the panic's payload.
type Panicked = (usize, Box<dyn Any + Send>);

/// `f` over `items` in chunks, on up to `max_threads` of the pool's threads
/// when there are at least `min` items and more than one thread; the results
/// concatenated in input order. A chunk whose `f` panicked is replaced by
/// `on_panic(chunk length, payload)`: resume the panic, or report the items.
pub fn map_chunks<T: Sync, R: Send>(
    items: &[T],
    min: usize,
    max_threads: usize,
    f: impl Fn(&[T]) -> Vec<R> + Sync,
    on_panic: impl Fn(usize, Box<dyn Any + Send>) -> Vec<R>,
) -> Vec<R> {
    map_chunks_at(items, min, max_threads, |_, chunk| f(chunk), on_panic)
}

/// [`map_chunks`], with each chunk's `f` also given the index of its first item.
pub fn map_chunks_at<T: Sync, R: Send>(
    items: &[T],
    min: usize,
    max_threads: usize,
    f: impl Fn(usize, &[T]) -> Vec<R> + Sync,
    on_panic: impl Fn(usize, Box<dyn Any + Send>) -> Vec<R>,
) -> Vec<R> {
    let threads = threads_for(items.len(), max_threads);
    if items.len() < min || threads < 2 {
        return f(0, items);
    }
    let size = items.len().div_ceil(threads);
    let parts: Vec<Result<Vec<R>, Panicked>> = items
        .par_chunks(size)
        .enumerate()
        .map(|(n, c)| catch_unwind(AssertUnwindSafe(|| f(n * size, c))).map_err(|p| (c.len(), p)))
        .collect();
    let mut out = Vec::with_capacity(items.len());
    for part in parts {
        match part {
            Ok(part) => out.extend(part),
            Err((len, panic)) => out.extend(on_panic(len, panic)),
        }
    }
    out
}

/// `f` on each item of `items`, in contiguous chunks on up to `max_threads`
/// of the pool's threads when `parallel` and there is more than one thread;
/// otherwise on the calling thread. A panic in `f` is resumed here.
pub fn for_each_mut<T: Send>(
    items: &mut [T],
    parallel: bool,
    max_threads: usize,
    f: impl Fn(&mut T) + Sync,
) {
    let threads = threads_for(items.len(), max_threads);
    if !parallel || threads < 2 {
        items.iter_mut().for_each(f);
        return;
    }
    let size = items.len().div_ceil(threads);
    items
        .par_chunks_mut(size)
        .for_each(|c| c.iter_mut().for_each(&f));
}

/// `a` and `b`, possibly on two of the pool's threads; a panic in either is
/// resumed here.
pub fn join<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    rayon::join(a, b)
}

/// How many threads `len` items are split over: no more than the pool's, than
/// `max_threads`, or than the items.
fn threads_for(len: usize, max_threads: usize) -> usize {
    rayon::current_num_threads().min(max_threads).min(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_item_is_visited_once_whether_split_or_not() {
        for parallel in [false, true] {
            let mut items: Vec<u64> = (0..1_001).collect();
            for_each_mut(&mut items, parallel, 4, |x| *x = *x * 3 + 1);
            let want: Vec<u64> = (0..1_001).map(|x| x * 3 + 1).collect();
            assert_eq!(items, want);
        }
    }

    #[test]
    fn results_keep_input_order_whether_split_or_not() {
        let items: Vec<u32> = (0..10_000).collect();
        let double = |c: &[u32]| c.iter().map(|x| x * 2).collect::<Vec<_>>();
        let want: Vec<u32> = items.iter().map(|x| x * 2).collect();
        let never = |_: usize, p: Box<dyn Any + Send>| std::panic::resume_unwind(p);
        assert_eq!(map_chunks(&items, 1, 4, double, never), want);
        assert_eq!(map_chunks(&items, usize::MAX, 4, double, never), want);
    }

    #[test]
    fn each_chunk_knows_where_it_starts() {
        for n in [0usize, 1, 2, 3, 7, 10_000, 10_001] {
            let items: Vec<usize> = (0..n).map(|x| x * 3).collect();
            let tag = |at: usize, c: &[usize]| {
                c.iter()
                    .enumerate()
                    .map(|(i, x)| (at + i, *x))
                    .collect::<Vec<_>>()
            };
            let never = |_: usize, p: Box<dyn Any + Send>| std::panic::resume_unwind(p);
            let want: Vec<(usize, usize)> = (0..n).map(|i| (i, i * 3)).collect();
            assert_eq!(map_chunks_at(&items, 1, 3, tag, never), want, "{n} items");
            assert_eq!(
                map_chunks_at(&items, usize::MAX, 3, tag, never),
                want,
                "{n} items"
            );
        }
    }

    #[test]
    fn a_panicking_chunk_is_replaced_by_what_on_panic_gives() {
        if rayon::current_num_threads() < 2 {
            // One core: everything runs on this thread and a panic is the caller's.
            return;
        }
        let items: Vec<u32> = (0..100).collect();
        let out = map_chunks(
            &items,
            1,
            2,
            |c: &[u32]| {
                assert!(c[0] == 0, "the second chunk fails");
                c.iter().map(|x| Some(*x)).collect()
            },
            |n, _| vec![None; n],
        );
        assert_eq!(out.len(), 100);
        assert!(out[..50].iter().all(Option::is_some));
        assert!(out[50..].iter().all(Option::is_none));
    }
}
