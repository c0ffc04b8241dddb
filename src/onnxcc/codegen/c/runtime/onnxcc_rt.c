/* onnxcc runtime: thread-local errors, aligned memory, the thread pool, and the checks
 * every generated dispatcher shares. See onnxcc_rt.h for the contract of each function. */
#define _GNU_SOURCE /* sched_getaffinity, pthread_setaffinity_np */
#include "onnxcc_rt.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- errors -------------------------------------------------------------------------- */

#define ONNXCC_ERR_CAP 2048
static __thread char onnxcc_err_buf[ONNXCC_ERR_CAP];

void onnxcc_error_clear(void) { onnxcc_err_buf[0] = '\0'; }

void onnxcc_error_set(const char *fmt, ...) {
  /* Format into a local first: an argument may point into the buffer itself. */
  char tmp[ONNXCC_ERR_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  snprintf(onnxcc_err_buf, sizeof onnxcc_err_buf, "%s", tmp);
}

const char *onnxcc_error_get(void) { return onnxcc_err_buf; }

/* ---- memory -------------------------------------------------------------------------- */

void *onnxcc_aligned_alloc(size_t bytes) {
  /* Round up to whole lines so a vectorised tail reading a full line stays inside. */
  if (bytes > SIZE_MAX - ONNXCC_ALIGN) return NULL;
  bytes = (bytes + ONNXCC_ALIGN - 1) & ~(size_t)(ONNXCC_ALIGN - 1);
  if (bytes == 0) bytes = ONNXCC_ALIGN;
  void *p = NULL;
  if (posix_memalign(&p, ONNXCC_ALIGN, bytes) != 0) return NULL;
  return p;
}

void onnxcc_aligned_free(void *p) { free(p); }

/* ---- library-allocated outputs: one block holds the DLManagedTensor, its shape and room
 * for strides; the data is a separate aligned block. The deleter frees both. */
static void onnxcc_managed_delete(DLManagedTensor *self) {
  if (self == NULL) return;
  onnxcc_aligned_free(self->dl_tensor.data);
  free(self);
}

DLManagedTensor *onnxcc_managed_new(int32_t ndim, const int64_t *shape, uint8_t code, uint8_t bits,
                                    size_t bytes) {
  size_t dims = (size_t)(ndim > 0 ? ndim : 1) * 2;
  DLManagedTensor *m = (DLManagedTensor *)calloc(1, sizeof *m + dims * sizeof(int64_t));
  if (m == NULL) return NULL;
  m->dl_tensor.data = onnxcc_aligned_alloc(bytes);
  if (m->dl_tensor.data == NULL) {
    free(m);
    return NULL;
  }
  int64_t *sh = (int64_t *)(m + 1);
  if (ndim > 0) memcpy(sh, shape, (size_t)ndim * sizeof(int64_t));
  m->dl_tensor.device.device_type = kDLCPU;
  m->dl_tensor.device.device_id = 0;
  m->dl_tensor.ndim = ndim;
  m->dl_tensor.dtype.code = code;
  m->dl_tensor.dtype.bits = bits;
  m->dl_tensor.dtype.lanes = 1;
  m->dl_tensor.shape = sh;
  m->dl_tensor.strides = NULL;
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = NULL;
  m->deleter = onnxcc_managed_delete;
  return m;
}

int onnxcc_tensor_bytes(int32_t ndim, const int64_t *shape, int bits, size_t *bytes) {
  uint64_t n = 1;
  for (int32_t j = 0; j < ndim; ++j) {
    if (shape[j] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[j], &n)) return 1;
  }
  uint64_t b;
  if (__builtin_mul_overflow(n, (uint64_t)bits, &b) || b > (uint64_t)SIZE_MAX - 7) return 1;
  *bytes = (size_t)((b + 7) / 8);
  return 0;
}

/* ---- thread pool ----------------------------------------------------------------------
 * Workers are created once, on first use, and sleep on work_cv between jobs. A job is
 * published under `mu` with a new generation number; each worker that wakes for it copies
 * the job, counts itself into `busy`, and claims chunks from the atomic `next` counter
 * alongside the caller. The caller, once no chunk is left, retires the job (active = 0)
 * and waits for busy == 0, so a job never outlives its parallel_for call. `submit_mu`
 * gives the pool to one caller thread at a time; a second caller runs inline instead of
 * waiting, which keeps concurrent model calls from serialising on each other.
 * `mu` is an adaptive mutex where glibc has one: a worker that sees a job while spinning takes
 * the lock while the caller is still publishing, and a worker that finishes as the caller
 * retires the job did so too; a plain mutex put the loser to sleep in the kernel, a few
 * microseconds of futex wake-up per parallel loop. A worker leaves a job without the lock
 * (`busy` is atomic) and signals done_cv only when the caller sleeps on it (`caller_waits`). */

#define ONNXCC_MAX_THREADS 256
#define ONNXCC_CHUNKS_PER_THREAD 4 /* some slack for uneven chunks, little overhead */

#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#define ONNXCC_POOL_MUTEX_INIT PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
#else
#define ONNXCC_POOL_MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
#endif

typedef struct {
  onnxcc_body_fn body;
  void *ctx;
  int64_t n, nchunks; /* chunk c is [c * n / nchunks, (c + 1) * n / nchunks) */
  int64_t *live;      /* the region profile's live mode: per chunk start, end, thread; else NULL */
} onnxcc_job;

static struct {
  pthread_mutex_t mu;        /* guards everything below but `next` */
  pthread_cond_t work_cv;    /* workers: a job was published, or shutdown */
  pthread_cond_t done_cv;    /* caller: busy dropped to 0 */
  pthread_mutex_t submit_mu; /* held by the caller thread that owns the pool */
  pthread_t threads[ONNXCC_MAX_THREADS];
  int nworkers;              /* threads created, the caller not included */
  int nthreads;              /* configured threads, the caller included */
  int shutdown;
  uint64_t generation;
  int active;
  int busy;                  /* workers in the job; changed atomically */
  int caller_waits;          /* the caller sleeps on done_cv; atomic */
  onnxcc_job job;
  int64_t next;              /* next chunk to claim; atomic */
} onnxcc_pool = {
    .mu = ONNXCC_POOL_MUTEX_INIT,
    .work_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
    .submit_mu = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_once_t onnxcc_pool_once = PTHREAD_ONCE_INIT;
static __thread int onnxcc_in_parallel; /* set inside bodies, and for life on workers */
static __thread int onnxcc_worker_tag;  /* 1 + the worker's index; 0 on callers */

/* Chunks differ by at most one item, the longer ones first (claimed in order, the last
 * chunks are what a thread finishing early waits on). Cut as ceil(n / nchunks) items each,
 * 33 items in 8 chunks were 7 chunks (6 of 5 items, one of 3), which 2 threads share 4:3,
 * 20 items to 13; as 8 chunks of 5 or 4, 4:4. */
static inline int64_t onnxcc_chunk_start(const onnxcc_job *job, int64_t c) {
  int64_t q = job->n / job->nchunks, r = job->n % job->nchunks;
  return c * q + (c < r ? c : r);
}

static int64_t onnxcc_chunk_count(int64_t n, int threads) {
  /* Up to 2 * ONNXCC_CHUNKS_PER_THREAD items per thread: one item a chunk, the finest split
   * (11 items in 8 chunks of 1 or 2 items were shared 7:4 by 2 threads claiming in turn;
   * as 11 chunks, 6:5). Else ONNXCC_CHUNKS_PER_THREAD chunks per thread, unless chunks would
   * be a few items each and a count of 2 to ONNXCC_CHUNKS_PER_THREAD per thread divides n:
   * then chunks of one size, as many per thread (18 items: 6 chunks of 3, not 8 of 2 or 3).
   * Fewer than 2 per thread would leave the caller nothing to take over from a worker that
   * starts late. */
  int64_t most = (int64_t)threads * ONNXCC_CHUNKS_PER_THREAD;
  if (n <= 2 * most) return n;
  if (n >= 4 * most) return most; /* chunk sizes differ by a quarter at most */
  for (int64_t k = most - most % threads; k >= 2 * (int64_t)threads; k -= threads)
    if (n % k == 0) return k;
  return most;
}

static int64_t onnxcc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void onnxcc_run_chunks(const onnxcc_job *job) {
  for (;;) {
    int64_t c = __atomic_fetch_add(&onnxcc_pool.next, 1, __ATOMIC_RELAXED);
    if (c >= job->nchunks) return;
    int64_t t = job->live ? onnxcc_now_ns() : 0;
    job->body(onnxcc_chunk_start(job, c), onnxcc_chunk_start(job, c + 1), job->ctx);
    if (job->live) {
      job->live[3 * c] = t;
      job->live[3 * c + 1] = onnxcc_now_ns();
      job->live[3 * c + 2] = onnxcc_worker_tag;
    }
  }
}

/* Spinning: a worker that finished a job, and the caller waiting for the workers, poll
 * (with a pause hint, yielding the core every few microseconds) for up to ONNXCC_SPIN_US
 * microseconds (default 100; 0: never) before blocking on a condition variable, so the back-to-back parallel kernels of one
 * model call do not pay a futex wake-up each, while an idle library burns no CPU. */
#define ONNXCC_SPIN_US_DEFAULT 100

static inline void onnxcc_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int64_t onnxcc_spin_ns; /* set once by onnxcc_pool_init */

/* Poll `done(arg)` for up to onnxcc_spin_ns; returns whether it became true. */
static int onnxcc_spin_until(int (*done)(const void *), const void *arg) {
  if (onnxcc_spin_ns <= 0) return done(arg);
  int64_t deadline = 0;
  for (unsigned i = 0;; i++) {
    if (done(arg)) return 1;
    onnxcc_cpu_relax();
    if ((i & 63) == 63) {
      int64_t now = onnxcc_now_ns();
      if (deadline == 0)
        deadline = now + onnxcc_spin_ns;
      else if (now >= deadline)
        return done(arg);
      /* Give the core up if someone else is runnable on it (more threads than free
       * cores: a spinner must not delay the thread it waits for). */
      sched_yield();
    }
  }
}

static int onnxcc_job_ready(const void *seen) {
  return __atomic_load_n(&onnxcc_pool.shutdown, __ATOMIC_ACQUIRE) ||
         (__atomic_load_n(&onnxcc_pool.active, __ATOMIC_ACQUIRE) &&
          __atomic_load_n(&onnxcc_pool.generation, __ATOMIC_ACQUIRE) != *(const uint64_t *)seen);
}

static int onnxcc_workers_idle(const void *unused) {
  (void)unused;
  return __atomic_load_n(&onnxcc_pool.busy, __ATOMIC_ACQUIRE) == 0;
}

/* Worker placement. With as many threads as cores, a worker woken after an idle spell is
 * often put on the caller's core (the scheduler favours the waker's cache), and the two then
 * share one core until load balancing moves one: measured, a 2-thread model call ran 2x
 * slower for the next ~5 ms after every pause of 20 ms or more, and for as long as another
 * runtime's threads kept the other core busy. So each worker is pinned to a CPU of its own
 * and one allowed CPU is left free for the caller (the host's thread: never pinned). When
 * the caller is found on a worker's CPU anyway, that worker moves to the free CPU: one
 * sched_getcpu per parallel loop, a syscall only on a move. Only when every thread can have
 * its own CPU; ONNXCC_PIN_THREADS=0 turns it off. Guarded by submit_mu. */
static int onnxcc_pin_threads;                    /* set once by onnxcc_pool_init */
static int onnxcc_worker_cpu[ONNXCC_MAX_THREADS]; /* each worker's CPU */
static int onnxcc_free_cpu;                       /* the allowed CPU no worker holds */

static void onnxcc_pin(pthread_t thread, int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  pthread_setaffinity_np(thread, sizeof one, &one); /* best effort: placement, not correctness */
}

/* Called by onnxcc_pool_init before the workers start: CPUs in order, caller's CPU free. */
static void onnxcc_plan_placement(void) {
  cpu_set_t allowed;
  const char *env = getenv("ONNXCC_PIN_THREADS");
  if ((env && strcmp(env, "0") == 0) || sched_getaffinity(0, sizeof allowed, &allowed) != 0 ||
      CPU_COUNT(&allowed) < onnxcc_pool.nthreads || onnxcc_pool.nthreads < 2)
    return;
  int here = sched_getcpu();
  if (here < 0 || !CPU_ISSET(here, &allowed)) return;
  onnxcc_free_cpu = here;
  int w = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && w < onnxcc_pool.nthreads - 1; cpu++)
    if (cpu != here && CPU_ISSET(cpu, &allowed)) onnxcc_worker_cpu[w++] = cpu;
  onnxcc_pin_threads = 1;
}

static void onnxcc_keep_caller_core_free(void) {
  if (!onnxcc_pin_threads) return;
  int here = sched_getcpu();
  if (here < 0 || here == onnxcc_free_cpu) return;
  for (int i = 0; i < onnxcc_pool.nworkers; i++) {
    if (onnxcc_worker_cpu[i] != here) continue;
    onnxcc_pin(onnxcc_pool.threads[i], onnxcc_free_cpu);
    onnxcc_worker_cpu[i] = onnxcc_free_cpu;
    onnxcc_free_cpu = here;
    return;
  }
}

static void *onnxcc_worker_main(void *arg) {
  onnxcc_worker_tag = (int)(intptr_t)arg;
  onnxcc_in_parallel = 1;
  uint64_t seen = 0;
  for (;;) {
    /* The spin reads without the lock; the decision is re-made under it. A job seen while
     * spinning may be retired before the lock is taken: then spin again for the next. */
    int spun = onnxcc_spin_until(onnxcc_job_ready, &seen);
    pthread_mutex_lock(&onnxcc_pool.mu);
    if (spun && !onnxcc_pool.shutdown && !(onnxcc_pool.active && onnxcc_pool.generation != seen)) {
      pthread_mutex_unlock(&onnxcc_pool.mu);
      continue;
    }
    while (!onnxcc_pool.shutdown && !(onnxcc_pool.active && onnxcc_pool.generation != seen))
      pthread_cond_wait(&onnxcc_pool.work_cv, &onnxcc_pool.mu);
    if (onnxcc_pool.shutdown) break;
    seen = onnxcc_pool.generation;
    onnxcc_job job = onnxcc_pool.job;
    __atomic_add_fetch(&onnxcc_pool.busy, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&onnxcc_pool.mu);
    onnxcc_run_chunks(&job);
    /* Either this load sees caller_waits set, or the caller's load of busy (after it set
     * caller_waits) sees this decrement: both are sequentially consistent. */
    if (__atomic_sub_fetch(&onnxcc_pool.busy, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&onnxcc_pool.caller_waits, __ATOMIC_SEQ_CST)) {
      pthread_mutex_lock(&onnxcc_pool.mu);
      pthread_cond_broadcast(&onnxcc_pool.done_cv);
      pthread_mutex_unlock(&onnxcc_pool.mu);
    }
  }
  pthread_mutex_unlock(&onnxcc_pool.mu);
  return NULL;
}

static int onnxcc_configured_threads(void) {
  const char *env = getenv("ONNXCC_NUM_THREADS");
  long t = 0;
  if (env && *env) {
    char *end = NULL;
    t = strtol(env, &end, 10);
    if (*end != '\0') t = 0; /* not a number: fall back to the CPU count */
  }
  if (t <= 0) t = sysconf(_SC_NPROCESSORS_ONLN);
  if (t <= 0) t = 1;
  return t > ONNXCC_MAX_THREADS ? ONNXCC_MAX_THREADS : (int)t;
}

/* The child of a fork has none of the parent's workers: run everything inline there. */
static void onnxcc_pool_after_fork(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER, fresh_adaptive = ONNXCC_POOL_MUTEX_INIT;
  pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
  onnxcc_pool.mu = fresh_adaptive;
  onnxcc_pool.submit_mu = fresh;
  onnxcc_pool.work_cv = fresh_cv;
  onnxcc_pool.done_cv = fresh_cv;
  onnxcc_pool.nworkers = 0;
  onnxcc_pool.active = 0;
  onnxcc_pool.busy = 0;
  onnxcc_pool.caller_waits = 0;
}

static void onnxcc_profile_init(void);

static void onnxcc_pool_init(void) {
  onnxcc_profile_init(); /* the region profile's mode, read once with the pool's settings */
  onnxcc_pool.nthreads = onnxcc_configured_threads();
  long spin_us = ONNXCC_SPIN_US_DEFAULT;
  const char *spin_env = getenv("ONNXCC_SPIN_US");
  if (spin_env && *spin_env) {
    char *end = NULL;
    long v = strtol(spin_env, &end, 10);
    if (*end == '\0' && v >= 0) spin_us = v > 100000 ? 100000 : v;
  }
  onnxcc_spin_ns = (int64_t)spin_us * 1000;
  onnxcc_plan_placement();
  /* Workers inherit this mask: keep the host's signals on the host's threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < onnxcc_pool.nthreads - 1; i++) {
    if (pthread_create(&onnxcc_pool.threads[i], NULL, onnxcc_worker_main, (void *)(intptr_t)(i + 1)) != 0) break;
    if (onnxcc_pin_threads) onnxcc_pin(onnxcc_pool.threads[i], onnxcc_worker_cpu[i]);
    onnxcc_pool.nworkers++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_atfork(NULL, NULL, onnxcc_pool_after_fork);
}

/* Join the workers when the library is unloaded, so none is left running unmapped code. */
__attribute__((destructor)) static void onnxcc_pool_fini(void) {
  if (onnxcc_pool.nworkers == 0) return;
  pthread_mutex_lock(&onnxcc_pool.mu);
  __atomic_store_n(&onnxcc_pool.shutdown, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&onnxcc_pool.work_cv);
  pthread_mutex_unlock(&onnxcc_pool.mu);
  for (int i = 0; i < onnxcc_pool.nworkers; i++) pthread_join(onnxcc_pool.threads[i], NULL);
  onnxcc_pool.nworkers = 0;
}

static int onnxcc_profile_region(int64_t n, onnxcc_body_fn body, void *ctx);
static int onnxcc_profiled_threads(void);
static int64_t *onnxcc_profile_live(int64_t nchunks);
static void onnxcc_profile_live_line(const onnxcc_job *job, int64_t t0);

int onnxcc_num_threads(void) {
  pthread_once(&onnxcc_pool_once, onnxcc_pool_init);
  int profiled = onnxcc_profiled_threads(); /* the task grids the profiled thread count gets */
  return profiled > 0 ? profiled : onnxcc_pool.nthreads;
}

void onnxcc_parallel_for(int64_t n, onnxcc_body_fn body, void *ctx) {
  if (n <= 0) return;
  if (onnxcc_in_parallel) {
    body(0, n, ctx);
    return;
  }
  pthread_once(&onnxcc_pool_once, onnxcc_pool_init);
  if (onnxcc_profile_region(n, body, ctx)) return;
  if (n == 1) {
    body(0, n, ctx);
    return;
  }
  if (onnxcc_pool.nworkers == 0 || pthread_mutex_trylock(&onnxcc_pool.submit_mu) != 0) {
    body(0, n, ctx);
    return;
  }
  onnxcc_keep_caller_core_free();
  onnxcc_job job = {body, ctx, n, onnxcc_chunk_count(n, onnxcc_pool.nworkers + 1), NULL};
  int64_t live_t0 = 0;
  if (onnxcc_profiled_threads() < 0) job.live = onnxcc_profile_live(job.nchunks), live_t0 = onnxcc_now_ns();

  pthread_mutex_lock(&onnxcc_pool.mu);
  onnxcc_pool.job = job;
  __atomic_store_n(&onnxcc_pool.next, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&onnxcc_pool.generation, onnxcc_pool.generation + 1, __ATOMIC_RELEASE);
  __atomic_store_n(&onnxcc_pool.active, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&onnxcc_pool.work_cv);
  pthread_mutex_unlock(&onnxcc_pool.mu);

  onnxcc_in_parallel = 1;
  onnxcc_run_chunks(&job);
  onnxcc_in_parallel = 0;

  /* Retire the job: no worker joins it after this (they check `active` under the lock),
   * so `busy` only falls from here on; spin on it a while before sleeping. */
  pthread_mutex_lock(&onnxcc_pool.mu);
  __atomic_store_n(&onnxcc_pool.active, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&onnxcc_pool.mu);
  if (!onnxcc_spin_until(onnxcc_workers_idle, NULL)) {
    pthread_mutex_lock(&onnxcc_pool.mu);
    __atomic_store_n(&onnxcc_pool.caller_waits, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&onnxcc_pool.busy, __ATOMIC_SEQ_CST) > 0)
      pthread_cond_wait(&onnxcc_pool.done_cv, &onnxcc_pool.mu);
    __atomic_store_n(&onnxcc_pool.caller_waits, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&onnxcc_pool.mu);
  }
  if (job.live) onnxcc_profile_live_line(&job, live_t0);
  pthread_mutex_unlock(&onnxcc_pool.submit_mu);
}

/* ---- region profile (benchmarks/region_profile.py) -------------------------------------
 * ONNXCC_REGION_PROFILE=FILE: every parallel loop runs on the calling thread, cut into the
 * chunks the pool would deal at ONNXCC_REGION_PROFILE_THREADS threads (default 2, which
 * onnxcc_num_threads reports, so the GEMM and conv calls cut their task grids for it), each
 * chunk timed by the monotonic clock (the thread's CPU clock cost 0.5-1.7 us a read in this
 * VM, the reader takes the least of several runs instead), one line per loop appended to FILE:
 *   R <library> <body offset, hex> <n> <t0> <t1> <chunk ns>... @<t2>
 * t0 / t1: the clock at entry and after the last chunk, t2 after the line is
 * formatted (what follows t2 is the caller's own work again); the file is buffered whole and
 * written at exit, so profile a process that exits. A benchmark replays the chunks
 * as threads would claim them: a load-independent estimate of the multi-thread time. Read
 * once by onnxcc_pool_init; off (unset), the cost is a test of a static per parallel loop. */
#include <dlfcn.h>

static FILE *onnxcc_profile_file;
static int onnxcc_profile_threads = 2;
static int onnxcc_profile_live_on; /* ONNXCC_REGION_PROFILE_LIVE=1: the pool runs as usual */

static void onnxcc_profile_init(void) {
  const char *path = getenv("ONNXCC_REGION_PROFILE");
  if (!path || !*path) return;
  const char *live = getenv("ONNXCC_REGION_PROFILE_LIVE");
  onnxcc_profile_live_on = live && strcmp(live, "1") == 0;
  const char *t = getenv("ONNXCC_REGION_PROFILE_THREADS");
  if (t && atoi(t) > 0) onnxcc_profile_threads = atoi(t) > ONNXCC_MAX_THREADS ? ONNXCC_MAX_THREADS : atoi(t);
  onnxcc_profile_file = fopen(path, "a");
  if (!onnxcc_profile_file) return;
  /* written out at exit only: a flush inside the run would count as the caller's work (and
   * two libraries' lines would interleave); glibc ignores the size of a buffer it allocates */
  size_t cap = (size_t)64 << 20;
  char *buf = malloc(cap);
  if (buf) setvbuf(onnxcc_profile_file, buf, _IOFBF, cap);
  int64_t a = onnxcc_now_ns(), b = a; /* the clock's own cost, which the reader subtracts */
  for (int i = 0; i < 1000; i++) b = onnxcc_now_ns();
  fprintf(onnxcc_profile_file, "H %d %.1f\n", onnxcc_profile_threads, (double)(b - a) / 1000.0);
}

/* 0: no profile; -1: live (the pool's own thread count); else the profiled count (set by
 * onnxcc_pool_init, which every caller has run) */
static int onnxcc_profiled_threads(void) {
  return !onnxcc_profile_file ? 0 : onnxcc_profile_live_on ? -1 : onnxcc_profile_threads;
}

static void onnxcc_profile_write_head(onnxcc_body_fn body, int64_t n) {
  Dl_info info = {0};
  int known = dladdr((void *)body, &info) && info.dli_fname;
  fprintf(onnxcc_profile_file, " %s %lx %lld", known ? info.dli_fname : "?",
          known ? (unsigned long)((char *)body - (char *)info.dli_fbase) : 0UL, (long long)n);
}

/* Live mode: each chunk's start, end and thread (0 the caller) as the pool ran it, one line
 *   L <library> <body offset> <n> <t0> <t1> <start:end:thread>... @<t2>
 * per loop, times from t0 (the caller's entry); t1 once the workers left. */
static int64_t *onnxcc_profile_live(int64_t nchunks) { return calloc((size_t)nchunks * 3, sizeof(int64_t)); }

static void onnxcc_profile_live_line(const onnxcc_job *job, int64_t t0) {
  int64_t t1 = onnxcc_now_ns();
  fputc('L', onnxcc_profile_file);
  onnxcc_profile_write_head(job->body, job->n);
  fprintf(onnxcc_profile_file, " %lld %lld", (long long)t0, (long long)t1);
  for (int64_t c = 0; c < job->nchunks; c++)
    fprintf(onnxcc_profile_file, " %lld:%lld:%lld", (long long)(job->live[3 * c] - t0),
            (long long)(job->live[3 * c + 1] - t0), (long long)job->live[3 * c + 2]);
  free(job->live);
  fprintf(onnxcc_profile_file, " @%lld\n", (long long)onnxcc_now_ns());
}

static int onnxcc_profile_region(int64_t n, onnxcc_body_fn body, void *ctx) {
  if (onnxcc_profiled_threads() <= 0) return 0;
  onnxcc_job job = {body, ctx, n, n == 1 ? 1 : onnxcc_chunk_count(n, onnxcc_profile_threads), NULL};
  int64_t *ns = malloc((size_t)job.nchunks * sizeof *ns);
  if (!ns) return 0;
  int64_t t0 = onnxcc_now_ns(), prev = t0;
  onnxcc_in_parallel = 1;
  for (int64_t c = 0; c < job.nchunks; c++) {
    body(onnxcc_chunk_start(&job, c), onnxcc_chunk_start(&job, c + 1), ctx);
    int64_t now = onnxcc_now_ns();
    ns[c] = now - prev;
    prev = now;
  }
  onnxcc_in_parallel = 0;
  fputc('R', onnxcc_profile_file);
  onnxcc_profile_write_head(body, n);
  fprintf(onnxcc_profile_file, " %lld %lld", (long long)t0, (long long)prev);
  for (int64_t c = 0; c < job.nchunks; c++) fprintf(onnxcc_profile_file, " %lld", (long long)ns[c]);
  free(ns);
  fprintf(onnxcc_profile_file, " @%lld\n", (long long)onnxcc_now_ns());
  return 1;
}

/* ---- dispatcher helpers -------------------------------------------------------------- */

static const char *onnxcc_dtype_text(uint8_t code, uint8_t bits, char *buf, size_t cap) {
  static const char *const kinds[] = {"i", "u", "f", "opaque", "bf", "c", "bool"};
  /* DLPack 1.1's small float codes 7..17, by the names onnxcc gives them */
  static const char *const small[] = {"f8e3m4", "f8e4m3", "f8e4m3b11fnuz", "f8e4m3fn", "f8e4m3fnuz",
                                      "f8e5m2", "f8e5m2fnuz", "f8e8m0", "f6e2m3fn", "f6e3m2fn", "f4e2m1"};
  if (code == kDLBool && bits == 8)
    snprintf(buf, cap, "bool");
  else if (code >= 7 && code <= 17)
    snprintf(buf, cap, "%s", small[code - 7]);
  else
    snprintf(buf, cap, "%s%d", code <= 6 ? kinds[code] : "code?", (int)bits);
  return buf;
}

static const char *onnxcc_device_text(int32_t type) {
  switch (type) {
    case kDLCPU: return "CPU memory";
    case kDLCUDA: return "CUDA device memory";
    case kDLCUDAHost: return "CUDA pinned host memory";
    case kDLCUDAManaged: return "CUDA managed memory";
    default: return "memory of another device";
  }
}

/* -1 when no two elements of t (whole-byte dtype, shape checked, strides given) share an
 * address, else a dim whose stride lets them meet: a zero stride, or one no longer than
 * the reach of the dims with smaller steps. Sufficient, not necessary: exotic interleaved
 * layouts that never meet may still be named (the caller refuses them as outputs). */
static int32_t onnxcc_strides_meet(const DLTensor *t) {
  /* Visit the dims of extent > 1 by growing |stride|: each step must clear the farthest
   * offset the smaller steps reach, else two index tuples land on one address. Sums that
   * would pass int64 saturate (then refused: no real tensor reaches that far). */
  int32_t rank = t->ndim;
  unsigned char done[rank > 0 ? rank : 1];
  memset(done, 0, sizeof done);
  int64_t reach = 0;
  for (;;) {
    int32_t pick = -1;
    int64_t step = 0;
    for (int32_t d = 0; d < rank; d++) {
      if (done[d] || t->shape[d] <= 1) continue;
      int64_t a = t->strides[d] == INT64_MIN ? INT64_MAX : t->strides[d] < 0 ? -t->strides[d] : t->strides[d];
      if (pick < 0 || a < step) pick = d, step = a;
    }
    if (pick < 0) return -1;
    if (step <= reach) return pick;
    done[pick] = 1;
    int64_t more;
    if (__builtin_mul_overflow(t->shape[pick] - 1, step, &more) || __builtin_add_overflow(reach, more, &reach))
      reach = INT64_MAX;
  }
}

/* Every check with its message; the fast path below comes here for anything uncommon
 * (another device than the first, a sub-byte dtype, strides that are not compact) and for
 * every failure, so each message is spelled once. */
__attribute__((noinline, cold)) static int onnxcc_check_tensor_slow(
    const DLTensor *t, const char *kind, const char *name, const int32_t *devices, int n_devices, int32_t rank,
    uint8_t code, uint8_t bits, const char *dtype_text, const char *shape_text, int allow_strided,
    onnxcc_span *span) {
  int device_ok = 0;
  for (int i = 0; i < n_devices; i++) device_ok |= (int32_t)t->device.device_type == devices[i];
  if (!device_ok) {
    onnxcc_error_set("%s \"%s\": tensor is in %s (DLPack device type %d), but this artifact reads %s", kind,
                     name, onnxcc_device_text(t->device.device_type), (int)t->device.device_type,
                     n_devices > 0 ? onnxcc_device_text(devices[0]) : "no tensors");
    return ONNXCC_ERR_DEVICE;
  }
  if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) {
    char got[32];
    onnxcc_dtype_text(t->dtype.code, t->dtype.bits, got, sizeof got);
    if (t->dtype.lanes != 1)
      onnxcc_error_set("%s \"%s\": expected dtype %s, got %sx%d", kind, name, dtype_text, got,
                       (int)t->dtype.lanes);
    else
      onnxcc_error_set("%s \"%s\": expected dtype %s, got %s", kind, name, dtype_text, got);
    return ONNXCC_ERR_DTYPE;
  }
  if (t->ndim != rank) {
    onnxcc_error_set("%s \"%s\": expected rank %d (shape %s), got rank %d", kind, name, (int)rank,
                     shape_text, (int)t->ndim);
    return ONNXCC_ERR_SHAPE;
  }
  if (rank > 0 && t->shape == NULL) {
    onnxcc_error_set("%s \"%s\": shape is NULL", kind, name);
    return ONNXCC_ERR_ARGS;
  }
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; d++) {
    if (t->shape[d] < 0) {
      onnxcc_error_set("%s \"%s\" dim %d: negative extent %lld", kind, name, (int)d,
                       (long long)t->shape[d]);
      return ONNXCC_ERR_SHAPE;
    }
  }
  /* element count and byte size with overflow checks: a shape whose size wraps int64 is
   * refused, never taken for a small tensor (an empty one stays empty whatever the rest) */
  int empty = 0;
  for (int32_t d = 0; d < rank; d++) empty |= t->shape[d] == 0;
  if (empty) numel = 0;
  int64_t nbytes = 0;
  for (int32_t d = 0; d < rank && !empty; d++) {
    if (__builtin_mul_overflow(numel, t->shape[d], &numel)) {
      onnxcc_error_set("%s \"%s\": element count overflows int64 at dim %d (extent %lld; shape %s)",
                       kind, name, (int)d, (long long)t->shape[d], shape_text);
      return ONNXCC_ERR_SHAPE;
    }
  }
  if (__builtin_mul_overflow(numel, (int64_t)((bits + 7) / 8), &nbytes)) {
    onnxcc_error_set("%s \"%s\": %lld elements of %d bits overflow int64 bytes (shape %s)", kind, name,
                     (long long)numel, (int)bits, shape_text);
    return ONNXCC_ERR_SHAPE;
  }
  if (bits < 8) { /* sub-byte types are packed 8 / bits per byte */
    int64_t per = 8 / (int64_t)bits;
    nbytes = numel / per + (numel % per != 0);
  }
  /* lowest and highest element offset (in elements) the strides reach: a compact tensor
   * spans [0, numel - 1]; negative strides reach below data + byte_offset */
  int64_t off_lo = 0, off_hi = numel > 0 ? numel - 1 : 0;
  int strided = 0;
  if (t->strides != NULL && numel > 0) {
    /* size-1 dims may carry any stride: DLPack exporters differ there */
    int64_t expect = 1;
    int bad = -1;
    for (int32_t d = rank - 1; d >= 0; d--) {
      if (t->shape[d] != 1 && t->strides[d] != expect && bad < 0) bad = d;
      expect *= t->shape[d];
    }
    if (bad >= 0) {
      int64_t want = 1;
      for (int32_t d = rank - 1; d > bad; d--) want *= t->shape[d];
      if (!allow_strided || bits < 8) {
        onnxcc_error_set("%s \"%s\" dim %d: stride %lld is not compact row-major (expected %lld)%s", kind,
                         name, (int)bad, (long long)t->strides[bad], (long long)want,
                         bits < 8 && allow_strided ? "; sub-byte tensors must be compact"
                         : !allow_strided && strcmp(kind, "output") == 0 ? "; this output is not served strided "
                                            "(the header lists those that are), pass it compact"
                         : !allow_strided ? "; this input is not served strided (the header lists those that "
                                            "are), pass it compact" : "");
        return ONNXCC_ERR_SHAPE;
      }
      strided = 1;
      off_lo = off_hi = 0;
      for (int32_t d = 0; d < rank; d++) {
        int64_t reach;
        if (t->shape[d] == 1) continue;
        if (__builtin_mul_overflow(t->shape[d] - 1, t->strides[d], &reach) ||
            __builtin_add_overflow(reach < 0 ? off_lo : off_hi, reach, reach < 0 ? &off_lo : &off_hi)) {
          onnxcc_error_set("%s \"%s\" dim %d: stride %lld times extent %lld overflows int64", kind, name,
                           (int)d, (long long)t->strides[d], (long long)t->shape[d]);
          return ONNXCC_ERR_SHAPE;
        }
      }
      int32_t meet = allow_strided == ONNXCC_STRIDED_WRITE ? onnxcc_strides_meet(t) : -1;
      if (meet >= 0) {
        onnxcc_error_set("%s \"%s\" dim %d: stride %lld (extent %lld) makes two elements share memory; an "
                         "output needs bytes of its own for every element (no zero or overlapping strides)",
                         kind, name, (int)meet, (long long)t->strides[meet], (long long)t->shape[meet]);
        return ONNXCC_ERR_SHAPE;
      }
    }
  }
  if (numel > 0 && t->data == NULL) {
    onnxcc_error_set("%s \"%s\": data is NULL", kind, name);
    return ONNXCC_ERR_ARGS;
  }
  /* every byte an element may occupy must lie inside the address space: a byte_offset, a
   * size or a stride that wraps it is refused, never dereferenced */
  uintptr_t start = 0, lo = 0, hi = 0;
  int64_t esz = (bits + 7) / 8, blo = 0, bhi = nbytes;
  if (strided && (__builtin_mul_overflow(off_lo, esz, &blo) || __builtin_mul_overflow(off_hi, esz, &bhi) ||
                  __builtin_add_overflow(bhi, esz, &bhi)))
    blo = INT64_MIN; /* refused just below */
  if (numel > 0 && (blo == INT64_MIN || t->byte_offset > (uint64_t)UINTPTR_MAX ||
                    __builtin_add_overflow((uintptr_t)t->data, (uintptr_t)t->byte_offset, &start) ||
                    (uintptr_t)(-blo) > start || __builtin_add_overflow(start, (uintptr_t)bhi, &hi))) {
    if (strided)
      onnxcc_error_set("%s \"%s\": data + byte_offset %llu with strides reaching elements [%lld, %lld] wraps "
                       "the address space", kind, name, (unsigned long long)t->byte_offset, (long long)off_lo,
                       (long long)off_hi);
    else
      onnxcc_error_set("%s \"%s\": data + byte_offset %llu + %lld bytes wraps the address space", kind, name,
                       (unsigned long long)t->byte_offset, (long long)nbytes);
    return ONNXCC_ERR_ARGS;
  }
  lo = start - (uintptr_t)(-blo);
  if (span != NULL) {
    span->lo = numel > 0 ? lo : 0;
    span->hi = numel > 0 ? hi : 0;
    span->nbytes = nbytes;
    span->strided = strided;
    span->device = ((int64_t)t->device.device_type << 32) | (uint32_t)t->device.device_id;
  }
  return ONNXCC_OK;
}

/* The fast path's strided case (whole-byte dtype, shape checked, numel > 0): the bytes the
 * strides reach, in one pass; anything odd (not served strided, an overflow, a wrap) goes to
 * the slow path for its message. Kept out of line so the compact path stays short. */
__attribute__((noinline)) static int onnxcc_check_strided(const DLTensor *t, const onnxcc_tensor_sig *g,
                                                         const int32_t *devices, int n_devices, int64_t nbytes,
                                                         onnxcc_span *span) {
  const int64_t *shape = t->shape, *strides = t->strides;
  int64_t esz = g->bits / 8, off_lo = 0, off_hi = 0, reach, below, above;
  uintptr_t lo, hi;
  if (!g->allow_strided) goto slow;
  for (int32_t d = 0; d < g->rank; d++) {
    if (shape[d] == 1) continue;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) ||
        __builtin_add_overflow(reach < 0 ? off_lo : off_hi, reach, reach < 0 ? &off_lo : &off_hi))
      goto slow;
  }
  if (g->allow_strided == ONNXCC_STRIDED_WRITE && onnxcc_strides_meet(t) >= 0) goto slow;
  if (__builtin_mul_overflow(off_lo, -esz, &below) || __builtin_add_overflow(off_hi, 1, &above) ||
      __builtin_mul_overflow(above, esz, &above) ||
      t->data == NULL || t->byte_offset > (uint64_t)UINTPTR_MAX ||
      __builtin_add_overflow((uintptr_t)t->data, (uintptr_t)t->byte_offset, &lo) || (uintptr_t)below > lo ||
      __builtin_add_overflow(lo, (uintptr_t)above, &hi))
    goto slow;
  span->lo = lo - (uintptr_t)below;
  span->hi = hi;
  span->nbytes = nbytes;
  span->strided = 1;
  span->device = ((int64_t)t->device.device_type << 32) | (uint32_t)t->device.device_id;
  return ONNXCC_OK;
slow:
  return onnxcc_check_tensor_slow(t, g->kind, g->name, devices, n_devices, g->rank, g->code, g->bits, g->dtype_text,
                                  g->shape_text, g->allow_strided, span);
}

int onnxcc_check_tensor(const DLTensor *t, const onnxcc_tensor_sig *g, const int32_t *devices, int n_devices,
                        onnxcc_span *span) {
  /* the common call, in one pass: first device, whole-byte dtype, compact, in range */
  const int32_t rank = g->rank;
  const int64_t *shape = t->shape;
  if (n_devices < 1 || (int32_t)t->device.device_type != devices[0] || t->dtype.code != g->code ||
      t->dtype.bits != g->bits || t->dtype.lanes != 1 || g->bits < 8 || t->ndim != rank ||
      (rank > 0 && shape == NULL))
    goto slow;
  int64_t numel = 1, nbytes;
  for (int32_t d = 0; d < rank; d++)
    if (shape[d] < 0 || __builtin_mul_overflow(numel, shape[d], &numel)) goto slow;
  if (__builtin_mul_overflow(numel, (int64_t)(g->bits / 8), &nbytes)) goto slow;
  uintptr_t lo = 0, hi = 0;
  if (numel > 0) {
    if (t->strides != NULL) {
      int64_t expect = 1;
      for (int32_t d = rank - 1; d >= 0; d--) {
        if (shape[d] != 1 && t->strides[d] != expect)
          return onnxcc_check_strided(t, g, devices, n_devices, nbytes, span);
        expect *= shape[d];
      }
    }
    if (t->data == NULL || t->byte_offset > (uint64_t)UINTPTR_MAX ||
        __builtin_add_overflow((uintptr_t)t->data, (uintptr_t)t->byte_offset, &lo) ||
        __builtin_add_overflow(lo, (uintptr_t)nbytes, &hi))
      goto slow;
  }
  span->lo = lo;
  span->hi = hi;
  span->nbytes = nbytes;
  span->strided = 0;
  span->device = ((int64_t)t->device.device_type << 32) | (uint32_t)t->device.device_id;
  return ONNXCC_OK;
slow:
  return onnxcc_check_tensor_slow(t, g->kind, g->name, devices, n_devices, rank, g->code, g->bits, g->dtype_text,
                                  g->shape_text, g->allow_strided, span);
}

int onnxcc_check_overlap(const onnxcc_span *inputs, int n_inputs, const char *const *input_names,
                         const onnxcc_span *outputs, int n_outputs, const char *const *output_names,
                         const unsigned char *in_place) {
  for (int k = 0; k < n_outputs; k++) {
    const onnxcc_span *o = &outputs[k];
    if (o->lo == o->hi) continue; /* empty: no bytes to share */
    for (int i = 0; i < n_inputs; i++) {
      const onnxcc_span *x = &inputs[i];
      if (!(o->lo < x->hi && x->lo < o->hi) || o->device != x->device) continue;
      int exact = o->lo == x->lo && o->hi == x->hi && !x->strided && !o->strided;
      if (exact && in_place != NULL && in_place[k * n_inputs + i]) continue;
      onnxcc_error_set("output \"%s\" overlaps input \"%s\" in memory; %s (pass an output buffer of its "
                       "own)", output_names[k], input_names[i],
                       exact ? "in-place calls are not supported by the version this call runs (not "
                               "proved safe)"
                             : "in-place calls are not supported but where an output aliases an input "
                               "exactly (same data, same shape, both compact) and a version was proved safe "
                               "for it");
      return ONNXCC_ERR_ARGS;
    }
    for (int j = 0; j < k; j++)
      if (o->lo < outputs[j].hi && outputs[j].lo < o->hi && o->device == outputs[j].device) {
        onnxcc_error_set("output \"%s\" overlaps output \"%s\" in memory; each output needs a buffer of "
                         "its own", output_names[k], output_names[j]);
        return ONNXCC_ERR_ARGS;
      }
  }
  return ONNXCC_OK;
}

/* Workspace cache: each calling thread keeps its last workspace and reuses it while it is
 * big enough, so a model called in a loop does not map (and page-fault in) a fresh arena
 * on every call. ONNXCC_WORKSPACE_CACHE=0 turns this off. Freed when the thread exits. */
static pthread_key_t onnxcc_ws_key;
static pthread_once_t onnxcc_ws_once = PTHREAD_ONCE_INIT;
static int onnxcc_ws_cache_on = 1;
static __thread void *onnxcc_ws_buf;
static __thread size_t onnxcc_ws_cap;
static __thread int onnxcc_ws_busy; /* a nested call (from inside a kernel) allocates afresh */

static void onnxcc_ws_free(void *p) { onnxcc_aligned_free(p); }

static int onnxcc_ws_key_made;

/* On unload: no thread-exit destructor may run into unmapped code after this. */
__attribute__((destructor)) static void onnxcc_ws_fini(void) {
  if (!onnxcc_ws_key_made) return;
  if (!onnxcc_ws_busy) {
    onnxcc_aligned_free(onnxcc_ws_buf);
    onnxcc_ws_buf = NULL;
    onnxcc_ws_cap = 0;
  }
  pthread_key_delete(onnxcc_ws_key);
  onnxcc_ws_key_made = 0;
  onnxcc_ws_cache_on = 0;
}

static void onnxcc_ws_init(void) {
  const char *env = getenv("ONNXCC_WORKSPACE_CACHE");
  if (env && env[0] == '0' && env[1] == '\0') onnxcc_ws_cache_on = 0;
  if (pthread_key_create(&onnxcc_ws_key, onnxcc_ws_free) != 0)
    onnxcc_ws_cache_on = 0;
  else
    onnxcc_ws_key_made = 1;
}

static void *onnxcc_ws_get(size_t bytes, int *cached) {
  *cached = 0;
  pthread_once(&onnxcc_ws_once, onnxcc_ws_init);
  if (!onnxcc_ws_cache_on || onnxcc_ws_busy) return onnxcc_aligned_alloc(bytes);
  if (onnxcc_ws_buf == NULL || onnxcc_ws_cap < bytes) {
    void *p = onnxcc_aligned_alloc(bytes);
    if (p == NULL) return NULL;
    onnxcc_aligned_free(onnxcc_ws_buf);
    onnxcc_ws_buf = p;
    onnxcc_ws_cap = bytes;
    pthread_setspecific(onnxcc_ws_key, p); /* frees it at thread exit */
  }
  onnxcc_ws_busy = 1;
  *cached = 1;
  return onnxcc_ws_buf;
}

static void onnxcc_ws_release(void *p, int cached) {
  if (cached)
    onnxcc_ws_busy = 0;
  else
    onnxcc_aligned_free(p);
}

static __thread int onnxcc_kernel_code_tl;

int onnxcc_last_kernel_code(void) { return onnxcc_kernel_code_tl; }

int onnxcc_call_version(int v, onnxcc_version_fn fn, int64_t ws_bytes, const int64_t *syms,
                        void *const *inputs, void *const *outputs) {
  void *ws = NULL;
  int cached = 0;
  if (ws_bytes < 0) {
    onnxcc_error_set("version %d: workspace size evaluates to %lld bytes", v, (long long)ws_bytes);
    return ONNXCC_ERR_ALLOC;
  }
  if (ws_bytes > 0 && (ws = onnxcc_ws_get((size_t)ws_bytes, &cached)) == NULL) {
    onnxcc_error_set("version %d: could not allocate %lld bytes of workspace", v, (long long)ws_bytes);
    return ONNXCC_ERR_ALLOC;
  }
  /* no onnxcc_error_clear() here: NAME_run cleared the message at its start and nothing
   * since set one on the way to this call (a TLS access saved per call) */
  int32_t rc = fn(syms, inputs, outputs, ws);
  onnxcc_ws_release(ws, cached);
  if (rc == 0) return ONNXCC_OK;
  onnxcc_kernel_code_tl = (int)rc; /* only failures: read only after an ERR_KERNEL */
  /* the kernels' own codes, named as kernel/expr.py's ERROR_MESSAGES names them (the CUDA
   * runtime reads the same names from its image) */
  const char *what = rc == 2 ? " (index out of range)" : rc == 3 ? " (integer division by zero)"
                   : rc == 4 ? " (kernel assertion failed)"
                   : rc == 5 ? " (capacity exceeded)" : "";
  if (onnxcc_err_buf[0] != '\0')
    onnxcc_error_set("kernel failed in version %d with code %d%s: %s", v, (int)rc, what, onnxcc_err_buf);
  else
    onnxcc_error_set("kernel failed in version %d with code %d%s", v, (int)rc, what);
  return ONNXCC_ERR_KERNEL;
}
