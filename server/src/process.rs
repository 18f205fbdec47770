//! Settings of the whole process that the `deltapilot` binary makes before it
//! starts its runtime, shared with the benchmarks so that they measure the
//! engine under the same settings as the binary.

/// Turns transparent huge pages off for this process (and the processes it
/// starts). Call it before the heap grows: pages already huge stay huge.
///
/// Why: on a kernel whose THP mode is `madvise` or `always`, mimalloc asks for
/// huge pages on its arenas, and a huge page is resident in full as soon as one
/// byte of it is touched. A server holding thousands of connections touches a
/// few KiB per connection at scattered places, so its RSS grew in 2 MiB steps,
/// well above what it touches, and CPU went to zeroing those pages. The fold
/// benchmarks call it too, so that they measure the engine with the pages
/// `deltapilot run` gives it.
///
/// # Errors
/// When the kernel refuses the call (a kernel without it, a seccomp filter).
/// That only costs memory and some CPU, so callers log it and go on.
pub fn disable_transparent_huge_pages() -> std::io::Result<()> {
    rustix::thread::disable_transparent_huge_pages(true).map_err(std::io::Error::from)
}
