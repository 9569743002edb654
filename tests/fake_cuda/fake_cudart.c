/* A fake CUDA runtime for machines without a GPU: the symbols libtzr loads,
 * with "device" memory in host RAM and streams that really are
 * asynchronous (a worker thread per stream runs queued copies after a
 * random delay; events complete when the stream reaches them). Copies from
 * cudaHostAlloc'd (pinned) memory are asynchronous; copies from pageable
 * memory complete before the call returns, as with the real runtime.
 * Device pointers are checked against live allocations: a copy outside
 * one fails with cudaErrorInvalidValue. FAKE_CUDA_DEVICES=0 simulates a
 * machine with the runtime but no device. cudaMemcpyBatchAsync has CUDA
 * 13's signature; FAKE_CUDA_RUNTIME_VERSION (default 13000) set below
 * that makes libtzr copy one by one, as with an older runtime. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ERR_INVALID_VALUE 1
#define ERR_MEMORY 2
#define ERR_NO_DEVICE 100
#define ERR_NOT_READY 600
#define ERR_HOST_REGISTERED 712

typedef struct alloc {
    uint8_t *p;
    size_t n;
    int pinned;
    int registered; /* cudaHostRegister'd: the caller's memory, not freed here */
    struct alloc *next;
} alloc;

typedef struct op {
    int kind; /* 0 copy, 1 event, 2 host function */
    void (*fn)(void *);
    void *arg;
    void *dst;
    const void *src;
    size_t n;
    struct fake_event *ev;
    uint64_t seq;
    struct op *next;
} op;

typedef struct fake_stream {
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    op *head, *tail;
    int busy, stop;
    unsigned seed;
} fake_stream;

typedef struct fake_event {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t recorded, completed;
} fake_event;

static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static alloc *allocs;
static _Thread_local int current_device;

static alloc *find(const void *p, size_t n, int pinned) {
    for (alloc *a = allocs; a; a = a->next)
        if (a->pinned == pinned && (const uint8_t *)p >= a->p && (const uint8_t *)p + n <= a->p + a->n) return a;
    return NULL;
}

static int track(void **out, size_t n, int pinned) {
    alloc *a = malloc(sizeof *a);
    uint8_t *p = NULL; /* cudaMalloc and cudaHostAlloc give 256-byte alignment */
    if (posix_memalign((void **)&p, 256, n ? n : 1) != 0) p = NULL;
    if (!a || !p) {
        free(a);
        free(p);
        return ERR_MEMORY;
    }
    memset(p, 0xCD, n); /* fresh device memory is garbage, not zeros */
    a->p = p;
    a->n = n;
    a->pinned = pinned;
    a->registered = 0;
    pthread_mutex_lock(&alloc_lock);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&alloc_lock);
    *out = p;
    return 0;
}

static int untrack(void *p, int pinned, int registered) {
    pthread_mutex_lock(&alloc_lock);
    for (alloc **pp = &allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->p == p && (*pp)->pinned == pinned && (*pp)->registered == registered) {
            alloc *a = *pp;
            if (registered) { /* the memory stays the caller's, contents too */
                *pp = a->next;
                pthread_mutex_unlock(&alloc_lock);
                free(a);
                return 0;
            }
            *pp = a->next;
            pthread_mutex_unlock(&alloc_lock);
            memset(a->p, 0xDD, a->n); /* poison: a late copy reads garbage */
            free(a->p);
            free(a);
            return 0;
        }
    }
    pthread_mutex_unlock(&alloc_lock);
    return ERR_INVALID_VALUE;
}

int cudaGetDeviceCount(int *count) {
    const char *e = getenv("FAKE_CUDA_DEVICES");
    *count = e ? atoi(e) : 1;
    return *count > 0 ? 0 : ERR_NO_DEVICE;
}
int cudaSetDevice(int d) {
    int n;
    cudaGetDeviceCount(&n);
    if (d < 0 || d >= n) return ERR_INVALID_VALUE;
    current_device = d;
    return 0;
}
int cudaMalloc(void **p, size_t n) {
    /* FAKE_CUDA_MAX_ALLOC: larger requests fail, as on a full device. */
    const char *max = getenv("FAKE_CUDA_MAX_ALLOC");
    if (max && n > strtoull(max, NULL, 10)) return ERR_MEMORY;
    return track(p, n, 0);
}
int cudaFree(void *p) { return untrack(p, 0, 0); }
int cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    return track(p, n, 1);
}
int cudaFreeHost(void *p) { return untrack(p, 1, 0); }

/* Pins the caller's memory: copies from it become asynchronous. A range
 * overlapping one already pinned fails (cudaErrorHostMemoryAlreadyRegistered
 * in the real runtime); FAKE_CUDA_NO_REGISTER=1 refuses every call, as a
 * runtime or kernel that cannot pin in place. */
static long register_calls; /* under alloc_lock */
long fake_cuda_register_calls(void) { /* for tests */
    pthread_mutex_lock(&alloc_lock);
    long n = register_calls;
    pthread_mutex_unlock(&alloc_lock);
    return n;
}
int cudaHostRegister(void *p, size_t n, unsigned flags) {
    (void)flags;
    if (!p || !n || getenv("FAKE_CUDA_NO_REGISTER")) return ERR_INVALID_VALUE;
    alloc *a = calloc(1, sizeof *a);
    if (!a) return ERR_MEMORY;
    pthread_mutex_lock(&alloc_lock);
    for (alloc *b = allocs; b; b = b->next)
        if (b->pinned && (uint8_t *)p < b->p + b->n && b->p < (uint8_t *)p + n) {
            pthread_mutex_unlock(&alloc_lock);
            free(a);
            return ERR_HOST_REGISTERED;
        }
    a->p = p;
    a->n = n;
    a->pinned = 1;
    a->registered = 1;
    register_calls++;
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&alloc_lock);
    return 0;
}
int cudaHostUnregister(void *p) { return untrack(p, 1, 1); }

static int check_copy(void *dst, const void *src, size_t n, int *pinned_src) {
    pthread_mutex_lock(&alloc_lock);
    int ok = find(dst, n, 0) != NULL;
    *pinned_src = find(src, n, 1) != NULL;
    pthread_mutex_unlock(&alloc_lock);
    return ok ? 0 : ERR_INVALID_VALUE;
}

int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    int pinned;
    if (kind == 2) { /* device to host */
        pthread_mutex_lock(&alloc_lock);
        int ok = find(src, n, 0) != NULL;
        pthread_mutex_unlock(&alloc_lock);
        if (!ok) return ERR_INVALID_VALUE;
        memcpy(dst, src, n);
        return 0;
    }
    if (kind != 1 || check_copy(dst, src, n, &pinned)) return ERR_INVALID_VALUE;
    memcpy(dst, src, n);
    return 0;
}

static void *stream_main(void *arg) {
    fake_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
        if (!s->head && s->stop) break;
        op *o = s->head;
        s->busy = 1;
        pthread_mutex_unlock(&s->lock);
        if (o->kind == 0) {
            struct timespec d = {0, (long)(rand_r(&s->seed) % 400) * 1000}; /* 0-0.4 ms */
            nanosleep(&d, NULL);
            memcpy(o->dst, o->src, o->n);
        } else if (o->kind == 2) {
            o->fn(o->arg);
        } else {
            pthread_mutex_lock(&o->ev->lock);
            if (o->seq > o->ev->completed) o->ev->completed = o->seq;
            pthread_cond_broadcast(&o->ev->cond);
            pthread_mutex_unlock(&o->ev->lock);
        }
        pthread_mutex_lock(&s->lock);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->busy = 0;
        free(o);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void enqueue(fake_stream *s, op *o) {
    pthread_mutex_lock(&s->lock);
    o->next = NULL;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int cudaStreamCreateWithFlags(void **out, unsigned flags) {
    (void)flags;
    fake_stream *s = calloc(1, sizeof *s);
    if (!s) return ERR_MEMORY;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->seed = (unsigned)(uintptr_t)s ^ (unsigned)time(NULL);
    if (pthread_create(&s->th, NULL, stream_main, s)) {
        free(s);
        return ERR_MEMORY;
    }
    *out = s;
    return 0;
}

int cudaStreamSynchronize(void *sp) {
    fake_stream *s = sp;
    pthread_mutex_lock(&s->lock);
    while (s->head || s->busy) pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int cudaStreamQuery(void *sp) {
    fake_stream *s = sp;
    pthread_mutex_lock(&s->lock);
    int busy = s->head || s->busy;
    pthread_mutex_unlock(&s->lock);
    return busy ? ERR_NOT_READY : 0;
}

/* Runs fn(arg) on the stream's thread once the work queued before it is
 * done, as the real call does (the fake NCCL queues its collectives so). */
int cudaLaunchHostFunc(void *stream, void (*fn)(void *), void *arg) {
    op *o = calloc(1, sizeof *o);
    if (!o || !stream || !fn) {
        free(o);
        return ERR_INVALID_VALUE;
    }
    o->kind = 2;
    o->fn = fn;
    o->arg = arg;
    enqueue(stream, o);
    return 0;
}

/* For the tests and the fake NCCL (not CUDA API): whether [p, p+n) lies in
 * one live device allocation, and how many allocations (device, pinned)
 * are live, so a test can tell that a load freed everything. */
int fake_cuda_is_device(const void *p, size_t n) {
    pthread_mutex_lock(&alloc_lock);
    int ok = find(p, n, 0) != NULL;
    pthread_mutex_unlock(&alloc_lock);
    return ok;
}
int fake_cuda_live(int pinned) {
    int k = 0;
    pthread_mutex_lock(&alloc_lock);
    for (alloc *a = allocs; a; a = a->next) k += a->pinned == pinned;
    pthread_mutex_unlock(&alloc_lock);
    return k;
}

int cudaStreamDestroy(void *sp) {
    fake_stream *s = sp;
    cudaStreamSynchronize(s);
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->th, NULL);
    free(s);
    return 0;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
    int pinned;
    if (kind != 1 || !stream || check_copy(dst, src, n, &pinned)) return ERR_INVALID_VALUE;
    if (!pinned) { /* pageable: the real runtime stages it before returning */
        cudaStreamSynchronize(stream);
        memcpy(dst, src, n);
        return 0;
    }
    op *o = calloc(1, sizeof *o);
    if (!o) return ERR_MEMORY;
    o->dst = dst;
    o->src = src;
    o->n = n;
    enqueue(stream, o);
    return 0;
}

int cudaRuntimeGetVersion(int *v) {
    const char *e = getenv("FAKE_CUDA_RUNTIME_VERSION");
    *v = e ? atoi(e) : 13000;
    return 0;
}

/* CUDA 13: (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream).
 * Checked as the real call documents: attrsIdxs[0] must be 0, indices
 * ascending and below count, every access order valid. Sources must be
 * pinned here (libtzr batches only its staging): a pageable one fails,
 * so a batch of anything else is caught. Copies run on the stream's
 * thread like cudaMemcpyAsync's, in order. */
static long batch_calls;
long fake_cuda_batch_calls(void) { return __atomic_load_n(&batch_calls, __ATOMIC_RELAXED); } /* for tests */
typedef struct fake_copy_attrs {
    int order, sloc_type, sloc_id, dloc_type, dloc_id;
    unsigned flags;
} fake_copy_attrs;
int cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                         fake_copy_attrs *attrs, size_t *idx, size_t nattrs, void *stream) {
    if (!stream || !count || !dsts || !srcs || !sizes || !attrs || !idx || !nattrs || idx[0] != 0)
        return ERR_INVALID_VALUE;
    for (size_t a = 0; a < nattrs; a++)
        if (attrs[a].order < 1 || attrs[a].order > 3 || idx[a] >= count || (a && idx[a] <= idx[a - 1]))
            return ERR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        int pinned;
        if (check_copy(dsts[i], srcs[i], sizes[i], &pinned) || !pinned) return ERR_INVALID_VALUE;
    }
    __atomic_fetch_add(&batch_calls, 1, __ATOMIC_RELAXED);
    for (size_t i = 0; i < count; i++) {
        op *o = calloc(1, sizeof *o);
        if (!o) return ERR_MEMORY;
        o->dst = dsts[i];
        o->src = srcs[i];
        o->n = sizes[i];
        enqueue(stream, o);
    }
    return 0;
}

int cudaEventCreateWithFlags(void **out, unsigned flags) {
    (void)flags;
    fake_event *e = calloc(1, sizeof *e);
    if (!e) return ERR_MEMORY;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    *out = e;
    return 0;
}

int cudaEventRecord(void *ev, void *stream) {
    fake_event *e = ev;
    op *o = calloc(1, sizeof *o);
    if (!o || !stream) {
        free(o);
        return ERR_INVALID_VALUE;
    }
    pthread_mutex_lock(&e->lock);
    o->seq = ++e->recorded;
    pthread_mutex_unlock(&e->lock);
    o->kind = 1;
    o->ev = e;
    enqueue(stream, o);
    return 0;
}

int cudaEventSynchronize(void *ev) {
    fake_event *e = ev;
    pthread_mutex_lock(&e->lock);
    while (e->completed < e->recorded) pthread_cond_wait(&e->cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int cudaEventDestroy(void *ev) {
    fake_event *e = ev;
    cudaEventSynchronize(e);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
    free(e);
    return 0;
}

int cudaDeviceSynchronize(void) { return 0; /* streams are synchronized by their users here */ }

const char *cudaGetErrorString(int err) {
    switch (err) {
    case 0: return "no error";
    case ERR_INVALID_VALUE: return "invalid argument";
    case ERR_MEMORY: return "out of memory";
    case ERR_NO_DEVICE: return "no CUDA-capable device is detected";
    case ERR_NOT_READY: return "device not ready";
    case ERR_HOST_REGISTERED: return "part or all of the requested memory range is already mapped";
    default: return "unknown error";
    }
}
