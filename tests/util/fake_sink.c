/* See fake_sink.h. */
#include "fake_sink.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct copy_job {
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
    int slot;
    struct copy_job *next;
};


static void *fake_main(void *arg) {
    fake_sink *f = arg;
    pthread_mutex_lock(&f->lock);
    for (;;) {
        while (!f->head && !f->stop) pthread_cond_wait(&f->cond, &f->lock);
        if (!f->head) break;
        copy_job *j = f->head;
        f->head = j->next;
        if (!f->head) f->tail = NULL;
        pthread_mutex_unlock(&f->lock);
        struct timespec d = {0, (long)(rand_r(&f->seed) % 200) * 1000};
        nanosleep(&d, NULL);
        memcpy(j->dst, j->src, j->len);
        free(j);
        pthread_mutex_lock(&f->lock);
        f->done++;
        pthread_cond_broadcast(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

static int fake_begin(tzr_sink *s, size_t i, const tzr_tensor_info *t) {
    fake_sink *f = (fake_sink *)s;
    f->dst[i] = calloc(1, t->nbytes + 1);
    f->writes[i] = calloc(1, t->nbytes + 1);
    f->len[i] = t->nbytes;
    return 0;
}

static int fake_submit(tzr_sink *s, int slot, size_t i, uint64_t off, const void *src, size_t len) {
    fake_sink *f = (fake_sink *)s;
    pthread_mutex_lock(&f->lock);
    if (slot >= 0 && f->fenced[slot]) f->violations++; /* submit after fence, before wait */
    for (size_t k = 0; k < len; k++) f->writes[i][off + k]++;
    copy_job *j = calloc(1, sizeof *j);
    j->dst = f->dst[i] + off;
    j->src = src;
    j->len = len;
    j->slot = slot;
    if (f->tail) f->tail->next = j;
    else f->head = j;
    f->tail = j;
    f->submitted++;
    if (slot >= 0 && f->nranges < 4096) {
        f->ranges[f->nranges].p = src;
        f->ranges[f->nranges].n = len;
        f->ranges_slot[f->nranges++] = slot;
    }
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int fake_fence(tzr_sink *s, int slot, uint64_t *fence) {
    fake_sink *f = (fake_sink *)s;
    pthread_mutex_lock(&f->lock);
    if (slot >= 0) {
        f->fenced[slot] = 1;
        f->fence_seq[slot] = f->submitted;
    }
    *fence = ((uint64_t)(slot + 1) << 40) | f->submitted;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static int fake_wait(tzr_sink *s, uint64_t fence) {
    fake_sink *f = (fake_sink *)s;
    int slot = (int)(fence >> 40) - 1;
    uint64_t seq = fence & ((1ull << 40) - 1);
    pthread_mutex_lock(&f->lock);
    while (f->done < seq) pthread_cond_wait(&f->cond, &f->lock);
    /* The fence passed: poison the slot's staging bytes so any later use
     * of them without a fresh read shows up as wrong data. */
    size_t keep = 0;
    for (size_t k = 0; k < f->nranges; k++) {
        if (f->ranges_slot[k] == slot) {
            memset((void *)f->ranges[k].p, 0xEE, f->ranges[k].n);
        } else {
            f->ranges[keep] = f->ranges[k];
            f->ranges_slot[keep++] = f->ranges_slot[k];
        }
    }
    f->nranges = keep;
    if (slot >= 0) f->fenced[slot] = 0;
    pthread_mutex_unlock(&f->lock);
    return 0;
}

static void fake_destroy(tzr_sink *s) {
    fake_sink *f = (fake_sink *)s;
    pthread_mutex_lock(&f->lock);
    f->stop = 1;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    pthread_join(f->th, NULL);
    for (size_t i = 0; i < f->n; i++) {
        free(f->dst[i]);
        free(f->writes[i]);
    }
    free(f->dst);
    free(f->writes);
    free(f->len);
    free(f);
}

fake_sink *fake_sink_new(size_t n) {
    fake_sink *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->n = n;
    f->dst = calloc(n, sizeof *f->dst);
    f->writes = calloc(n, sizeof *f->writes);
    f->len = calloc(n, sizeof *f->len);
    f->seed = (unsigned)time(NULL);
    f->base.begin_tensor = fake_begin;
    f->base.submit = fake_submit;
    f->base.fence = fake_fence;
    f->base.wait = fake_wait;
    f->base.destroy = fake_destroy;
    f->base.name = "fake-async";
    pthread_create(&f->th, NULL, fake_main, f);
    return f;
}
