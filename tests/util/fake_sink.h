/* A fake asynchronous sink for pipeline tests: a thread copies each
 * submitted piece after a random delay; when a fence passes, the staging
 * bytes it covered are poisoned (0xEE), so any later use of a slot without
 * a fresh read shows up as wrong data. It counts writes per byte (every
 * byte must land once) and flags a submit into a fenced, unwaited slot. */
#ifndef TZR_TEST_FAKE_SINK_H
#define TZR_TEST_FAKE_SINK_H
#include <pthread.h>
#include <stdint.h>

#include "tzr_load.h"

typedef struct copy_job copy_job;

typedef struct fake_sink {
    tzr_sink base;
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    copy_job *head, *tail;
    uint64_t submitted, done; /* job counters */
    uint8_t **dst;            /* per tensor: its bytes (NULL if never begun) */
    uint8_t **writes;         /* per tensor per byte: times written */
    uint64_t *len;
    size_t n;
    int stop;
    unsigned seed;
    struct { const uint8_t *p; size_t n; } ranges[4096];
    int ranges_slot[4096];
    size_t nranges;
    int fenced[1024];         /* slot fenced and not yet waited */
    uint64_t fence_seq[1024];
    int violations;           /* submits into a fenced, unwaited slot */
} fake_sink;

/* A sink for a reader of n tensors; free with tzr_sink_free(&f->base). */
fake_sink *fake_sink_new(size_t n);
#endif
