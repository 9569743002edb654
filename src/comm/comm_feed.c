/* See comm_feed.h. The pipeline reports tensors as they complete (in
 * index order, from its worker threads); the feed turns that into the
 * length of the complete prefix of its byte range. */
#include "thread.h"
#include "comm_feed.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

struct comm_feed {
    tzr_reader *r;
    const comm_layout *L;
    tzr_sink *sink;
    uint64_t lo, hi;
    size_t k0, k1;        /* spans intersecting [lo, hi) */
    size_t *span_of;      /* reader index -> span, for the spans of the range */
    unsigned char *want;  /* filter mask over reader indices */
    unsigned char *done;  /* per span in [k0, k1) */
    size_t next;          /* first span not complete */
    int verify;
    volatile int cancel;
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int finished, rc;
    uint64_t bytes_read;
    char msg[1000];       /* the load's error, for the waiting thread */
};

static uint64_t prefix_end(const comm_feed *f) {
    if (f->next >= f->k1) return f->hi;
    uint64_t a = f->L->spans[f->next].arena_off;
    return a > f->lo ? a : f->lo;
}

static void advance(comm_feed *f) {
    while (f->next < f->k1 && f->done[f->next - f->k0]) f->next++;
}

static int on_tensor(void *ctx, size_t index, const tzr_tensor_info *t) {
    (void)t;
    comm_feed *f = ctx;
    pthread_mutex_lock(&f->lock);
    size_t k = f->span_of[index];
    if (k >= f->k0 && k < f->k1) f->done[k - f->k0] = 1;
    advance(f);
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int select_range(void *ctx, size_t index, const tzr_tensor_info *t, tzr_byte_selection *sel) {
    (void)t;
    const comm_feed *f = ctx;
    const comm_span *s = &f->L->spans[f->span_of[index]];
    uint64_t a = s->arena_off > f->lo ? s->arena_off : f->lo;
    uint64_t b = s->arena_off + s->len < f->hi ? s->arena_off + s->len : f->hi;
    if (a == s->arena_off && b == s->arena_off + s->len) return 0;
    memset(sel, 0, sizeof *sel);
    sel->offset = a - s->arena_off;
    sel->run = sel->stride = sel->outer_stride = b - a;
    sel->count = sel->outer_count = 1;
    return 1;
}

static void *run(void *arg) {
    comm_feed *f = arg;
    tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
    lo.verify = f->verify;
    lo.filter = tzr_filter_mask;
    lo.filter_ctx = f->want;
    lo.select = select_range;
    lo.select_ctx = f;
    lo.on_tensor = on_tensor;
    lo.on_tensor_ctx = f;
    lo.cancel = &f->cancel;
    tzr_load_stats st = {0};
    int rc = tzr_load(f->r, f->sink, &lo, &st);
    pthread_mutex_lock(&f->lock);
    if (rc) {
        int code = rc;
        tzr_error_save(f->msg, sizeof f->msg, &code);
    } else {
        f->next = f->k1;
    }
    f->rc = rc;
    f->bytes_read = st.bytes_read;
    f->finished = 1;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

static void feed_free(comm_feed *f) {
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    free(f->span_of);
    free(f->want);
    free(f->done);
    free(f);
}

int comm_feed_start(comm_feed **out, tzr_reader *r, const comm_layout *L, tzr_sink *sink, uint64_t lo,
                    uint64_t hi, int verify) {
    *out = NULL;
    size_t n = tzr_reader_count(r);
    if (n != L->res->count) return tzr_fail(TZR_EINVAL, "feed: the file has %zu tensors, the layout %zu", n, L->res->count);
    comm_feed *f = calloc(1, sizeof *f);
    if (!f) return tzr_fail(TZR_ENOMEM, "out of memory");
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->r = r, f->L = L, f->sink = sink, f->lo = lo, f->hi = hi;
    f->verify = verify && tzr_reader_format(r) == TZR_FORMAT_TENSORIZER; /* safetensors: no hashes */
    size_t k0 = 0, k1 = 0;
    while (k0 < L->nspans && L->spans[k0].arena_off + L->spans[k0].len <= lo) k0++;
    for (k1 = k0; k1 < L->nspans && L->spans[k1].arena_off < hi;) k1++;
    f->k0 = k0, f->k1 = k1, f->next = k0;
    f->span_of = malloc((n ? n : 1) * sizeof *f->span_of);
    f->want = calloc(n ? n : 1, 1);
    f->done = calloc(k1 - k0 + 1, 1);
    if (!f->span_of || !f->want || !f->done) {
        feed_free(f);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) f->span_of[i] = (size_t)-1;
    for (size_t k = k0; k < k1; k++) {
        const comm_span *s = &L->spans[k];
        f->span_of[s->tensor] = k;
        if (s->len) f->want[s->tensor] = 1;
        else f->done[k - k0] = 1; /* nothing to wait for */
    }
    advance(f);
    if (tzr_thread_start(&f->th, run, f) != 0) {
        feed_free(f);
        return tzr_fail(TZR_ENOMEM, "cannot start the reading thread");
    }
    *out = f;
    return 0;
}

int comm_feed_wait(comm_feed *f, uint64_t upto, void (*poll)(void *), void *ctx) {
    pthread_mutex_lock(&f->lock);
    while (!f->rc && prefix_end(f) < upto && !f->finished) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&f->cond, &f->lock, &ts);
        if (poll) {
            pthread_mutex_unlock(&f->lock);
            poll(ctx);
            pthread_mutex_lock(&f->lock);
        }
    }
    int rc = f->rc;
    if (rc) tzr_error_restore(f->msg, rc);
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int comm_feed_finish(comm_feed *f, int cancel, uint64_t *bytes_read) {
    if (!f) return 0;
    if (cancel) __atomic_store_n(&f->cancel, 1, __ATOMIC_RELAXED);
    pthread_join(f->th, NULL);
    int rc = f->rc;
    if (rc && !cancel) tzr_error_restore(f->msg, rc);
    if (bytes_read) *bytes_read += f->bytes_read;
    feed_free(f);
    return rc;
}
