/* CUDA device sink: staging slots are pinned host memory; each slot's
 * copies go on one of a few non-blocking streams, and an event recorded
 * after a slot's last copy is its fence. Where the runtime has batched
 * copies (cudaMemcpyBatchAsync), a slot's copies are gathered and issued
 * as one call at its fence: a copy call costs microseconds of driver
 * time, most of a 4 KiB tensor's load (100k tensors: 0.26 s one by one,
 * 0.1 s batched, on an H200). */
#include "gpu_rt.h"
#include "mem.h"
#include "tzr_load.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* In sink_host.c: checks a table entry for tensor `index`. */
TZR_HIDDEN int tzr_table_entry(size_t index, const tzr_tensor_info *t, size_t n, const void *ptr,
                               uint64_t len, const char *what);

#define NSTREAMS 4
#define DEV_ALIGN 256 /* what cudaMalloc guarantees, kept for carved tensors */

typedef struct dev_tensor {
    uint8_t *ptr;
    uint64_t len;
    int owned;
} dev_tensor;

/* The copies submitted from one staging slot since its last fence. */
typedef struct batch {
    pthread_mutex_t lock; /* pieces of a unit are delivered by several threads */
    void **dst;
    const void **src;
    size_t *len;
    size_t n, cap;
} batch;

typedef struct cuda_sink {
    tzr_sink base;
    const tzr_gpu_api *api;
    int device;
    tzr_device_dest_fn dest;
    void *dest_ctx;
    dev_tensor *tab;        /* tzr_sink_cuda_table_new: the caller's table, copied */
    size_t tab_n;
    tzr_gpu_stream streams[NSTREAMS];
    pthread_mutex_t lock;   /* events array */
    tzr_gpu_event *events; /* index slot+1 (slot -1: zero fills) */
    size_t nevents;
    dev_tensor *t;          /* grown in begin_tensor, before any copy */
    size_t n;
    uint8_t *slab;          /* reserve(): every tensor carved from one cudaMalloc */
    uint64_t slab_used, slab_size;
    void **registered;      /* staging pinned by cudaHostRegister (freed otherwise) */
    size_t nregistered, registered_cap;
    pthread_rwlock_t batches_lock; /* growing the array, not its batches */
    batch **batches;        /* by staging slot; only with api->copy_batch_async */
    size_t nbatches;
} cuda_sink;

static _Thread_local int thread_device = -1;

/* The current device is per thread in CUDA; pipeline threads are ours. */
static int use_device(cuda_sink *c) {
    if (thread_device == c->device) return 0;
    int err = c->api->set_device(c->device);
    if (err) return tzr_gpu_fail(c->api, err, TZR_GPU_F(set_device), NULL);
    thread_device = c->device;
    return 0;
}

static tzr_gpu_stream stream_of(cuda_sink *c, int slot) { return c->streams[(unsigned)(slot + 1) % NSTREAMS]; }

static int cuda_begin(tzr_sink *s, size_t index, const tzr_tensor_info *t) {
    cuda_sink *c = (cuda_sink *)s;
    int rc = use_device(c);
    if (rc) return rc;
    if (index >= c->n) {
        size_t n = c->n ? c->n : 64;
        while (n <= index) n *= 2;
        dev_tensor *grown = realloc(c->t, n * sizeof *grown);
        if (!grown) return tzr_fail(TZR_ENOMEM, "out of memory");
        memset(grown + c->n, 0, (n - c->n) * sizeof *grown);
        c->t = grown;
        c->n = n;
    }
    dev_tensor *d = &c->t[index];
    d->len = t->nbytes;
    char nb[TZR_NAMEBUF];
    if (c->tab) {
        dev_tensor e = index < c->tab_n ? c->tab[index] : (dev_tensor){0};
        rc = tzr_table_entry(index, t, c->tab_n, e.ptr, e.len, "device");
        if (rc) return rc;
        d->ptr = e.ptr;
        d->owned = 0;
        return 0;
    }
    if (c->dest) {
        d->ptr = c->dest(c->dest_ctx, index, t);
        if (!d->ptr && t->nbytes)
            return tzr_fail(TZR_EINVAL, "tensor '%s': the device destination callback returned NULL",
                            tzr_printable(t->name, t->name_len, nb, sizeof nb));
        return 0;
    }
    uint64_t need = (t->nbytes + DEV_ALIGN - 1) / DEV_ALIGN * DEV_ALIGN;
    if (c->slab && need <= c->slab_size - c->slab_used) {
        d->ptr = c->slab + c->slab_used;
        c->slab_used += need;
        return 0;
    }
    void *p = NULL;
    int err = c->api->dev_alloc(&p, t->nbytes ? (size_t)t->nbytes : 1);
    if (err) {
        tzr_gpu_fail(c->api, err, TZR_GPU_F(dev_alloc), NULL);
        return tzr_fail_prefix(TZR_EDEVICE, "tensor '%s' (%llu bytes): ",
                               tzr_printable(t->name, t->name_len, nb, sizeof nb), (unsigned long long)t->nbytes);
    }
    d->ptr = p;
    d->owned = 1;
    return 0;
}

/* One cudaMalloc for every tensor: per-tensor calls cost microseconds to
 * milliseconds each (100k tensors: seconds), and as many cudaFree calls at
 * the end. If the device cannot give one block, tensors are allocated one
 * by one as before. */
static int cuda_reserve(tzr_sink *s, size_t count, uint64_t bytes) {
    cuda_sink *c = (cuda_sink *)s;
    if (c->dest || c->tab || c->slab || count == 0) return 0;
    uint64_t size = bytes + (uint64_t)count * DEV_ALIGN;
    if (size < bytes) return 0;
    int rc = use_device(c);
    if (rc) return rc;
    void *p = NULL;
    if (c->api->dev_alloc(&p, (size_t)size) != 0 || !p) return 0; /* not sticky: per tensor then */
    c->slab = p;
    c->slab_size = size;
    c->slab_used = 0;
    return 0;
}

/* Slot s's batch, made on first use. */
static batch *batch_of(cuda_sink *c, int slot) {
    size_t i = (size_t)slot;
    pthread_rwlock_rdlock(&c->batches_lock);
    batch *b = i < c->nbatches ? c->batches[i] : NULL;
    pthread_rwlock_unlock(&c->batches_lock);
    if (b) return b;
    pthread_rwlock_wrlock(&c->batches_lock);
    if (i >= c->nbatches) {
        size_t n = c->nbatches ? c->nbatches : 16;
        while (n <= i) n *= 2;
        batch **grown = realloc(c->batches, n * sizeof *grown);
        if (grown) {
            memset(grown + c->nbatches, 0, (n - c->nbatches) * sizeof *grown);
            c->batches = grown;
            c->nbatches = n;
        }
    }
    if (i < c->nbatches && !c->batches[i] && (c->batches[i] = calloc(1, sizeof **c->batches)))
        pthread_mutex_init(&c->batches[i]->lock, NULL);
    b = i < c->nbatches ? c->batches[i] : NULL;
    pthread_rwlock_unlock(&c->batches_lock);
    return b;
}

static int batch_add(batch *b, void *dst, const void *src, size_t len) {
    pthread_mutex_lock(&b->lock);
    if (b->n == b->cap) {
        size_t n = b->cap ? b->cap * 2 : 64;
        void **d = realloc(b->dst, n * sizeof *d);
        if (d) b->dst = d;
        const void **s = realloc(b->src, n * sizeof *s);
        if (s) b->src = s;
        size_t *l = realloc(b->len, n * sizeof *l);
        if (l) b->len = l;
        if (!d || !s || !l) {
            pthread_mutex_unlock(&b->lock);
            return tzr_fail(TZR_ENOMEM, "out of memory");
        }
        b->cap = n;
    }
    b->dst[b->n] = dst, b->src[b->n] = src, b->len[b->n++] = len;
    pthread_mutex_unlock(&b->lock);
    return 0;
}

/* Issues slot s's gathered copies on its stream (before its fence). */
static int batch_flush(cuda_sink *c, int slot) {
    batch *b = batch_of(c, slot);
    if (!b) return tzr_fail(TZR_ENOMEM, "out of memory");
    pthread_mutex_lock(&b->lock);
    int err = 0, f = TZR_GPU_F(copy_batch_async);
    if (b->n == 1) {
        f = TZR_GPU_F(copy_async);
        err = c->api->copy_async(b->dst[0], b->src[0], b->len[0], TZR_GPU_MEMCPY_H2D, stream_of(c, slot));
    } else if (b->n > 1) {
        /* Stream order: the staging stays untouched until the fence passes. */
        tzr_gpu_copy_attrs attrs = {TZR_GPU_SRC_ACCESS_STREAM, 0, 0, 0, 0, 0};
        size_t first = 0;
        err = c->api->copy_batch_async(b->dst, b->src, b->len, b->n, &attrs, &first, 1, stream_of(c, slot));
    }
    b->n = 0;
    pthread_mutex_unlock(&b->lock);
    return err ? tzr_gpu_fail(c->api, err, f, NULL) : 0;
}

static int cuda_submit(tzr_sink *s, int slot, size_t index, uint64_t off, const void *src, size_t len) {
    cuda_sink *c = (cuda_sink *)s;
    int rc = use_device(c);
    if (rc) return rc;
    if (index >= c->n || off > c->t[index].len || len > c->t[index].len - off)
        return tzr_fail(TZR_EINVAL, "cuda sink: copy outside tensor %zu", index);
    /* Only staging slots are gathered: their memory is ours and pinned
     * (slot -1 copies zeros from ordinary memory). */
    if (slot >= 0 && c->api->copy_batch_async) {
        batch *b = batch_of(c, slot);
        return b ? batch_add(b, c->t[index].ptr + off, src, len) : tzr_fail(TZR_ENOMEM, "out of memory");
    }
    int err = c->api->copy_async(c->t[index].ptr + off, src, len, TZR_GPU_MEMCPY_H2D, stream_of(c, slot));
    return err ? tzr_gpu_fail(c->api, err, TZR_GPU_F(copy_async), NULL) : 0;
}

static int event_for(cuda_sink *c, size_t i, tzr_gpu_event *ev) {
    pthread_mutex_lock(&c->lock);
    if (i >= c->nevents) {
        size_t n = c->nevents ? c->nevents : 16;
        while (n <= i) n *= 2;
        tzr_gpu_event *grown = realloc(c->events, n * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&c->lock);
            return tzr_fail(TZR_ENOMEM, "out of memory");
        }
        memset(grown + c->nevents, 0, (n - c->nevents) * sizeof *grown);
        c->events = grown;
        c->nevents = n;
    }
    int err = 0;
    if (!c->events[i]) err = c->api->event_create(&c->events[i], TZR_GPU_EVENT_DISABLE_TIMING);
    *ev = c->events[i];
    pthread_mutex_unlock(&c->lock);
    return err ? tzr_gpu_fail(c->api, err, TZR_GPU_F(event_create), NULL) : 0;
}

static int cuda_fence(tzr_sink *s, int slot, uint64_t *fence) {
    cuda_sink *c = (cuda_sink *)s;
    int rc = use_device(c);
    tzr_gpu_event ev;
    if (!rc && slot >= 0 && c->api->copy_batch_async) rc = batch_flush(c, slot);
    if (!rc) rc = event_for(c, (size_t)(slot + 1), &ev);
    if (rc) return rc;
    int err = c->api->event_record(ev, stream_of(c, slot));
    if (err) return tzr_gpu_fail(c->api, err, TZR_GPU_F(event_record), NULL);
    *fence = (uint64_t)(slot + 1);
    return 0;
}

static int cuda_wait(tzr_sink *s, uint64_t fence) {
    cuda_sink *c = (cuda_sink *)s;
    tzr_gpu_event ev;
    int rc = event_for(c, (size_t)fence, &ev);
    if (rc) return rc;
    int err = c->api->event_sync(ev);
    return err ? tzr_gpu_fail(c->api, err, TZR_GPU_F(event_sync), NULL) : 0;
}

/* Staging is huge-page memory the runtime pins in place: most of a
 * pinned allocation's cost is clearing fresh pages, and 2 MiB pages clear
 * far faster than cudaHostAlloc's 4 KiB ones. Where registering fails
 * (a runtime or kernel that refuses), cudaHostAlloc as before. */
static void *cuda_alloc_staging(tzr_sink *s, size_t len) {
    cuda_sink *c = (cuda_sink *)s;
    void *p = NULL;
    if (use_device(c)) return NULL;
    pthread_mutex_lock(&c->lock);
    int room = c->nregistered < c->registered_cap;
    if (!room) {
        size_t n = c->registered_cap ? c->registered_cap * 2 : 32;
        void **grown = realloc(c->registered, n * sizeof *grown);
        if (grown) c->registered = grown, c->registered_cap = n, room = 1;
    }
    pthread_mutex_unlock(&c->lock);
    if (room && (p = tzr_alloc_big(len))) {
        if (c->api->host_register(p, len, TZR_GPU_HOST_REGISTER_PORTABLE) == 0) {
            pthread_mutex_lock(&c->lock);
            if (c->nregistered < c->registered_cap) {
                c->registered[c->nregistered++] = p;
                pthread_mutex_unlock(&c->lock);
                return p;
            }
            pthread_mutex_unlock(&c->lock);
            c->api->host_unregister(p);
        }
        free(p);
        p = NULL;
    }
    if (c->api->host_alloc(&p, len, TZR_GPU_HOST_ALLOC_PORTABLE) != 0) return NULL;
    return p;
}

static void cuda_free_staging(tzr_sink *s, void *p, size_t len) {
    (void)len;
    cuda_sink *c = (cuda_sink *)s;
    int reg = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nregistered && !reg; i++)
        if (c->registered[i] == p) c->registered[i] = c->registered[--c->nregistered], reg = 1;
    pthread_mutex_unlock(&c->lock);
    if (reg) {
        c->api->host_unregister(p);
        free(p);
    } else {
        c->api->host_free(p);
    }
}

static void cuda_destroy(tzr_sink *s) {
    cuda_sink *c = (cuda_sink *)s;
    if (c->api) {
        use_device(c);
        for (int i = 0; i < NSTREAMS; i++)
            if (c->streams[i]) {
                c->api->stream_sync(c->streams[i]);
                c->api->stream_destroy(c->streams[i]);
            }
        for (size_t i = 0; i < c->nevents; i++)
            if (c->events[i]) c->api->event_destroy(c->events[i]);
        for (size_t i = 0; i < c->n; i++)
            if (c->t[i].owned) c->api->dev_free(c->t[i].ptr);
        if (c->slab) c->api->dev_free(c->slab);
    }
    for (size_t i = 0; i < c->nbatches; i++)
        if (c->batches[i]) {
            pthread_mutex_destroy(&c->batches[i]->lock);
            free(c->batches[i]->dst), free(c->batches[i]->src), free(c->batches[i]->len);
            free(c->batches[i]);
        }
    free(c->batches);
    free(c->registered); /* every staging block was freed by its load */
    pthread_rwlock_destroy(&c->batches_lock);
    free(c->events);
    free(c->tab);
    free(c->t);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int tzr_sink_cuda_new(tzr_sink **out, int device, tzr_device_dest_fn dest, void *dest_ctx) {
    *out = NULL;
    const tzr_gpu_api *api;
    int rc = tzr_gpu_load(&api);
    if (rc) return rc;
    cuda_sink *c = calloc(1, sizeof *c);
    if (!c) return tzr_fail(TZR_ENOMEM, "out of memory");
    pthread_mutex_init(&c->lock, NULL);
    pthread_rwlock_init(&c->batches_lock, NULL);
    c->api = api;
    c->device = device;
    c->dest = dest;
    c->dest_ctx = dest_ctx;
    c->base.begin_tensor = cuda_begin;
    c->base.reserve = cuda_reserve;
    c->base.submit = cuda_submit;
    c->base.struct_size = sizeof c->base;
    c->base.fence = cuda_fence;
    c->base.wait = cuda_wait;
    c->base.alloc_staging = cuda_alloc_staging;
    c->base.free_staging = cuda_free_staging;
    c->base.destroy = cuda_destroy;
    c->base.name = "cuda";
    c->base.ctx = c;
    rc = use_device(c);
    for (int i = 0; !rc && i < NSTREAMS; i++) {
        int err = api->stream_create(&c->streams[i], TZR_GPU_STREAM_NONBLOCKING);
        if (err) rc = tzr_gpu_fail(api, err, TZR_GPU_F(stream_create), NULL);
    }
    if (rc) {
        cuda_destroy(&c->base);
        return rc;
    }
    *out = &c->base;
    return 0;
}

int tzr_sink_cuda_table_new(tzr_sink **out, int device, void *const *ptrs, const uint64_t *lens, size_t n) {
    if (!out || (n && (!ptrs || !lens))) return tzr_fail(TZR_EINVAL, "cuda table sink: NULL table");
    *out = NULL;
    dev_tensor *tab = calloc(n ? n : 1, sizeof *tab);
    if (!tab) return tzr_fail(TZR_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        tab[i].ptr = ptrs[i];
        tab[i].len = lens[i];
    }
    int rc = tzr_sink_cuda_new(out, device, NULL, NULL);
    if (rc) {
        free(tab);
        return rc;
    }
    cuda_sink *c = (cuda_sink *)*out;
    c->tab = tab;
    c->tab_n = n;
    return 0;
}

int tzr_sink_cuda_data(tzr_sink *s, size_t index, void **dev_ptr, uint64_t *len) {
    cuda_sink *c = (cuda_sink *)s;
    if (!s || s->destroy != cuda_destroy) return tzr_fail(TZR_EINVAL, "not a CUDA sink");
    if (index >= c->n || !c->t[index].ptr) return tzr_fail(TZR_ENOTFOUND, "tensor %zu was not loaded", index);
    *dev_ptr = c->t[index].ptr;
    *len = c->t[index].len;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tzr_cuda_h2d_bandwidth(int device, size_t bytes, int reps, double *gbps) {
    const tzr_gpu_api *api;
    int rc = tzr_gpu_load(&api);
    if (rc) return rc;
    int err = api->set_device(device);
    if (err) return tzr_gpu_fail(api, err, TZR_GPU_F(set_device), NULL);
    thread_device = device;
    void *host = NULL, *dev = NULL;
    if ((err = api->host_alloc(&host, bytes, TZR_GPU_HOST_ALLOC_PORTABLE))) return tzr_gpu_fail(api, err, TZR_GPU_F(host_alloc), NULL);
    if ((err = api->dev_alloc(&dev, bytes))) {
        api->host_free(host);
        return tzr_gpu_fail(api, err, TZR_GPU_F(dev_alloc), NULL);
    }
    memset(host, 1, bytes);
    err = api->copy(dev, host, bytes, TZR_GPU_MEMCPY_H2D); /* warm-up */
    double t0 = now_s();
    for (int i = 0; i < reps && !err; i++) err = api->copy(dev, host, bytes, TZR_GPU_MEMCPY_H2D);
    if (!err) err = api->device_sync();
    double secs = now_s() - t0;
    api->dev_free(dev);
    api->host_free(host);
    if (err) return tzr_gpu_fail(api, err, TZR_GPU_F(copy), NULL);
    *gbps = secs > 0 ? (double)bytes * reps / secs / 1e9 : 0;
    return 0;
}
