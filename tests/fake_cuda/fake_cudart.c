/* A fake CUDA runtime for machines without a GPU: the symbols libtzr loads,
 * with "device" memory in host RAM and streams that really are
 * asynchronous (a worker thread per stream runs queued copies after a
 * random delay; events complete when the stream reaches them). Copies from
 * cudaHostAlloc'd (pinned) memory are asynchronous; copies from pageable
 * memory complete before the call returns, as with the real runtime.
 * Device pointers are checked against live allocations: a copy outside
 * one fails with cudaErrorInvalidValue. FAKE_CUDA_DEVICES=0 simulates a
 * machine with the runtime but no device. */
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

typedef struct alloc {
    uint8_t *p;
    size_t n;
    int pinned;
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
    pthread_mutex_lock(&alloc_lock);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&alloc_lock);
    *out = p;
    return 0;
}

static int untrack(void *p, int pinned) {
    pthread_mutex_lock(&alloc_lock);
    for (alloc **pp = &allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->p == p && (*pp)->pinned == pinned) {
            alloc *a = *pp;
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
int cudaFree(void *p) { return untrack(p, 0); }
int cudaHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    return track(p, n, 1);
}
int cudaFreeHost(void *p) { return untrack(p, 1); }

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
    default: return "unknown error";
    }
}
