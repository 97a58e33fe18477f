//! A persistent thread pool for the many small parallel loops of a decode step.
//!
//! Why not rayon: a decode step is hundreds of matmuls of a few to a few hundred µs each;
//! the pool must hand out a loop in well under a microsecond and allocate nothing. Here a
//! call publishes one job (a pointer to the caller's closure, a task count) and workers that
//! are still spinning pick it up at once; idle workers spin for `SPIN` before parking on a
//! condvar, so a pool between requests costs no CPU.
//!
//! Protocol (all state is atomics, so a late worker can never read a half-written job):
//! `state` packs a job generation, the generation's task count and the next task index into
//! one word. A thread claims task `i` of generation `g` with a compare-exchange from
//! `(g, n, i)` to `(g, n, i+1)`, and only while `i < n`. The caller publishes the closure
//! pointer before bumping the state to the next generation (release), runs tasks itself, then
//! waits until `done == n`. Every claimed task has finished before `for_each` returns, and no
//! claim can succeed after that (the generation's tasks are exhausted), so the closure
//! outlives every call to it. Panics in tasks are caught, counted as done, and re-raised in
//! the caller.
//!
//! Why the count lives in the state word: with the count in a separate atomic, a worker that
//! read an exhausted `(g, i)` could then read the NEXT loop's larger count and closure (the
//! caller stores them before bumping the generation), pass `i < n`, and claim on the old
//! generation's word — running one task of the new loop twice and counting it done, so the
//! caller could return while a task still ran on its stack (the rare SIGSEGV of session 11;
//! `tests::tasks_never_run_twice_or_late` reproduced it). A claim now proves its count.

use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking. A decode step's gaps between parallel
/// loops are a few µs to tens of µs; parking and waking costs ~10-50 µs.
const SPIN: Duration = Duration::from_micros(300);

type TaskFn<'a> = dyn Fn(usize) + Sync + 'a;

/// Bits of the task count and of the next task index in `state`; the generation takes the
/// rest (24 bits, wrapping: a worker would have to sleep through 16M loops to be confused).
const TASK_BITS: u32 = 20;
const TASK_MASK: u64 = (1 << TASK_BITS) - 1;

/// `state` of generation `gen` with `n` tasks, `next` of them handed out.
fn pack(gen: u64, n: usize, next: usize) -> u64 {
    (gen << (2 * TASK_BITS)) | ((n as u64) << TASK_BITS) | next as u64
}

/// `(generation, task count, next task)` of a `state` word.
fn unpack(state: u64) -> (u64, usize, usize) {
    (
        state >> (2 * TASK_BITS),
        ((state >> TASK_BITS) & TASK_MASK) as usize,
        (state & TASK_MASK) as usize,
    )
}

struct Shared {
    /// generation | task count | next task index (see [`pack`]).
    state: AtomicU64,
    /// Points at the caller's `&dyn Fn` (a fat reference living on the caller's stack).
    job: AtomicPtr<&'static TaskFn<'static>>,
    /// Tasks of the current generation finished (or panicked).
    done: AtomicUsize,
    /// Set when a task of the current generation panicked.
    panicked: AtomicBool,
    /// Panic payload of the first panicking worker task.
    panic_payload: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    shutdown: AtomicBool,
    /// Parked workers; the publisher takes `sleep_lock` and notifies only if non-zero.
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

thread_local! {
    /// True on pool workers and on a caller inside `for_each`: a nested `for_each` runs
    /// inline instead of deadlocking on the pool.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

/// Persistent worker threads; the calling thread takes part in every loop.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes concurrent `for_each` callers (the pool runs one loop at a time).
    call_lock: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `n_threads` threads in total: the caller plus `n_threads - 1` workers
    /// (`0` is treated as `1`).
    pub fn new(n_threads: usize) -> ThreadPool {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            panic_payload: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads.max(1))
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("ferrox-kernels-{i}"))
                    .spawn(move || worker_loop(&shared))
                    .expect("spawning a kernel worker thread")
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            call_lock: Mutex::new(()),
        }
    }

    /// Threads taking part in a loop (workers + the caller).
    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(0)`, ..., `f(n_tasks - 1)` across the pool and returns when all are done.
    /// Tasks are handed out dynamically, in increasing index order. A panic in any task is
    /// re-raised here after all other tasks finished.
    pub fn for_each(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks == 0 {
            return;
        }
        if self.workers.is_empty() || n_tasks == 1 || IN_POOL.with(|c| c.get()) {
            (0..n_tasks).for_each(f);
            return;
        }
        if n_tasks > TASK_MASK as usize {
            // More tasks than the state word counts: run them as consecutive loops.
            let per = TASK_MASK as usize;
            for start in (0..n_tasks).step_by(per) {
                let m = per.min(n_tasks - start);
                self.for_each(m, &|i| f(start + i));
            }
            return;
        }
        let _serial = self.call_lock.lock().unwrap_or_else(|e| e.into_inner());
        IN_POOL.with(|c| c.set(true));
        let s = &*self.shared;

        // SAFETY (lifetime erasure): the pointer is only dereferenced by threads that claimed
        // a task of this generation, and we do not return before all of them finished.
        let f_static: &'static TaskFn<'static> = unsafe { std::mem::transmute(f) };
        let job_ref: &&'static TaskFn<'static> = &f_static;
        s.job
            .store(job_ref as *const _ as *mut _, Ordering::Relaxed);
        s.done.store(0, Ordering::Relaxed);
        s.panicked.store(false, Ordering::Relaxed);
        let gen = (unpack(s.state.load(Ordering::Relaxed)).0 + 1) & 0xFF_FFFF;
        s.state.store(pack(gen, n_tasks, 0), Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }

        run_tasks(s, gen);

        let mut spins = 0u32;
        while s.done.load(Ordering::Acquire) < n_tasks {
            spins += 1;
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        IN_POOL.with(|c| c.set(false));
        if s.panicked.load(Ordering::Acquire) {
            let payload = s
                .panic_payload
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            resume_unwind(payload.unwrap_or_else(|| Box::new("a ThreadPool task panicked")));
        }
    }
}

/// Claims and runs tasks of generation `gen` until none is left. A panicking task stores its
/// payload (the first one wins) and sets `panicked` before it is counted done, so the caller,
/// which waits for `done`, always sees it.
fn run_tasks(s: &Shared, gen: u64) {
    loop {
        let cur = s.state.load(Ordering::Acquire);
        let (g, n, idx) = unpack(cur);
        if g != gen || idx >= n {
            return;
        }
        let job = s.job.load(Ordering::Acquire);
        if s.state
            .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        // SAFETY: we claimed task `idx` of generation `gen`, whose caller is blocked in
        // `for_each` until `done` counts this task, so the closure and the reference to it
        // are alive. `job` was read after observing `(gen, n, idx)` with `idx < n` (acquire),
        // while that generation still had an unclaimed task (so its caller had not returned
        // and published another closure), and the claim succeeded on that very word.
        let f: &TaskFn<'_> = unsafe { *job };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(idx))) {
            let mut slot = s.panic_payload.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_none() {
                *slot = Some(p);
            }
            drop(slot);
            s.panicked.store(true, Ordering::Release);
        }
        s.done.fetch_add(1, Ordering::AcqRel);
    }
}

fn worker_loop(s: &Shared) {
    IN_POOL.with(|c| c.set(true));
    let mut seen = 0u64;
    while let Some(gen) = wait_for_job(s, seen) {
        seen = gen;
        run_tasks(s, gen);
    }
}

/// Waits until the generation differs from `seen`; `None` on shutdown.
fn wait_for_job(s: &Shared, seen: u64) -> Option<u64> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if s.shutdown.load(Ordering::Acquire) {
            return None;
        }
        let gen = unpack(s.state.load(Ordering::Acquire)).0;
        if gen != seen {
            return Some(gen);
        }
        spins += 1;
        if spins.is_multiple_of(64) && start.elapsed() > SPIN {
            break;
        }
        std::hint::spin_loop();
    }
    let mut guard = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
    s.sleepers.fetch_add(1, Ordering::SeqCst);
    let result = loop {
        if s.shutdown.load(Ordering::SeqCst) {
            break None;
        }
        let gen = unpack(s.state.load(Ordering::SeqCst)).0;
        if gen != seen {
            break Some(gen);
        }
        guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
    };
    s.sleepers.fetch_sub(1, Ordering::SeqCst);
    result
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.n_threads())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn pool_is_send_and_sync() {
        fn shared<T: Send + Sync>() {}
        shared::<ThreadPool>();
        shared::<crate::Activations>();
        shared::<crate::QMatrix<'static>>();
    }

    #[test]
    fn every_task_runs_once() {
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads);
            assert_eq!(pool.n_threads(), threads);
            for n in [0, 1, 2, 5, 100, 1000] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                pool.for_each(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "threads={threads} n={n}"
                );
            }
        }
    }

    /// A worker that read the old loop's state just before the caller published the next
    /// loop must not claim a task of the new loop under the old generation (it used to: it
    /// read the new task count and closure, then its claim on the exhausted old generation
    /// succeeded, so one task ran twice and `done` ran ahead — the caller returned while a
    /// task was still running on its stack). Each loop here checks that every task ran
    /// exactly once and that no task runs after its loop returned.
    #[test]
    fn tasks_never_run_twice_or_late() {
        let pool = ThreadPool::new(2);
        let live = AtomicUsize::new(0);
        for round in 0..300_000usize {
            let n = [2, 3, 40][round % 3];
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            live.store(round, Ordering::SeqCst);
            pool.for_each(n, &|i| {
                assert_eq!(
                    live.load(Ordering::SeqCst),
                    round,
                    "a task of an old loop ran"
                );
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(
                    h.load(Ordering::Relaxed),
                    1,
                    "round {round}: task {i} of {n}"
                );
            }
        }
    }

    #[test]
    fn many_small_loops_and_parking() {
        let pool = ThreadPool::new(2);
        let total = AtomicUsize::new(0);
        for round in 0..20_000 {
            pool.for_each(3, &|i| {
                total.fetch_add(i + 1, Ordering::Relaxed);
            });
            if round == 10_000 {
                std::thread::sleep(Duration::from_millis(2)); // let the worker park
            }
        }
        assert_eq!(total.load(Ordering::Relaxed), 20_000 * 6);
    }

    #[test]
    fn nested_for_each_runs_inline() {
        let pool = ThreadPool::new(2);
        let total = AtomicUsize::new(0);
        pool.for_each(4, &|_| {
            pool.for_each(4, &|j| {
                total.fetch_add(j, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 6);
    }

    #[test]
    fn panic_propagates_and_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.for_each(64, &|i| {
                if i == 37 {
                    panic!("task 37");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.for_each(10, &|_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn concurrent_callers_are_serialized() {
        let pool = Arc::new(ThreadPool::new(2));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let pool = Arc::clone(&pool);
                std::thread::spawn(move || {
                    let sum = AtomicUsize::new(0);
                    for _ in 0..500 {
                        pool.for_each(8, &|i| {
                            sum.fetch_add(i, Ordering::Relaxed);
                        });
                    }
                    sum.load(Ordering::Relaxed)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 500 * 28);
        }
    }
}
