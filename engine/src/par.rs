//! Splitting independent work over a few threads, with the results in input
//! order, so that a parallel step gives exactly what the sequential one gives.
//!
//! Used where one large step dominates: a checkpoint restore converting 100k
//! entities, a full regeneration encoding every resource. The engine stays pure:
//! these are scoped threads over borrowed data, joined before returning.
//!
//! What it does NOT do: keep a pool, or split small inputs (below `min` items
//! everything runs on the calling thread; a thread costs more than they do).

use std::any::Any;

/// `f` over `items` in chunks, on up to `max_threads` threads (the calling one
/// included) when there are at least `min` items and more than one core; the
/// results concatenated in input order. A chunk whose `f` panicked is replaced by
/// `on_panic(chunk length, payload)`: resume the panic, or report the items.
pub(crate) fn map_chunks<T: Sync, R: Send>(
    items: &[T],
    min: usize,
    max_threads: usize,
    f: impl Fn(&[T]) -> Vec<R> + Sync,
    on_panic: impl Fn(usize, Box<dyn Any + Send>) -> Vec<R>,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(max_threads);
    if items.len() < min || threads < 2 {
        return f(items);
    }
    let size = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let mut chunks = items.chunks(size);
        let first = chunks.next().unwrap_or_default();
        let rest: Vec<_> = chunks
            .map(|c| (c.len(), scope.spawn(move || f(c))))
            .collect();
        let mut out = f(first);
        for (len, h) in rest {
            match h.join() {
                Ok(part) => out.extend(part),
                Err(panic) => out.extend(on_panic(len, panic)),
            }
        }
        out
    })
}

/// `f` over `items` moved out in chunks (each with the index of its first
/// item), on up to `max_threads` threads as [`map_chunks`] splits them; the
/// results in input order. Moving the items avoids touching shared reference
/// counts from several threads. A panic in `f` is resumed on the caller: the
/// callers have no error path, so a panic there is a bug.
pub(crate) fn map_owned<T: Send, R: Send>(
    mut items: Vec<T>,
    min: usize,
    max_threads: usize,
    f: impl Fn(usize, Vec<T>) -> Vec<R> + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(max_threads);
    if items.len() < min || threads < 2 {
        return f(0, items);
    }
    let size = items.len().div_ceil(threads);
    let mut chunks = Vec::with_capacity(threads);
    // From the end, so each split moves one chunk only.
    while items.len() > size {
        let at = (items.len() - 1) / size * size;
        chunks.push(items.split_off(at));
    }
    chunks.push(items);
    chunks.reverse();
    let f = &f;
    std::thread::scope(|scope| {
        let mut chunks = chunks.into_iter();
        let first = chunks.next().unwrap_or_default();
        let mut start = first.len();
        let rest: Vec<_> = chunks
            .map(|c| {
                let at = start;
                start += c.len();
                scope.spawn(move || f(at, c))
            })
            .collect();
        let mut out = f(0, first);
        for h in rest {
            match h.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn owned_chunks_keep_input_order_and_know_where_they_start() {
        for n in [0usize, 1, 2, 3, 7, 10_000, 10_001] {
            let items: Vec<usize> = (0..n).map(|x| x * 3).collect();
            let tag = |at: usize, c: Vec<usize>| {
                c.into_iter()
                    .enumerate()
                    .map(|(i, x)| (at + i, x))
                    .collect::<Vec<_>>()
            };
            let want: Vec<(usize, usize)> = (0..n).map(|i| (i, i * 3)).collect();
            assert_eq!(map_owned(items.clone(), 1, 3, tag), want, "{n} items");
            assert_eq!(map_owned(items, usize::MAX, 3, tag), want, "{n} items");
        }
    }

    #[test]
    fn a_panicking_chunk_is_replaced_by_what_on_panic_gives() {
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
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
