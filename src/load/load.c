/* tzr_load, the public entry of the pipelined loader (see pipeline.h):
 * set up a pipeline, pick the tensors and their byte selections, read the
 * headers planning needs (phase 1), plan, size the ring, bind each unit to
 * its destination, run the workers, drain every fence, and report. */
#include "codec.h"
#include "mem.h"
#include "pipeline.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The file range the load reads: from its first unit to its last, or,
 * planned later (overlapped), from the first selected record with data to
 * the last. Empty (lo == hi) when nothing is read. */
static void read_span(const pipeline *p, uint64_t *lo, uint64_t *hi) {
    *lo = *hi = 0;
    if (!p->overlap) {
        if (p->nunits) *lo = p->units[0].off, *hi = p->units[p->nunits - 1].off + p->units[p->nunits - 1].len;
        return;
    }
    size_t a = 0, b = p->n;
    while (a < p->n && !(p->want[a] && tzr_reader_tensor(p->r, a)->data_length)) a++;
    while (b > a && !(p->want[b - 1] && tzr_reader_tensor(p->r, b - 1)->data_length)) b--;
    if (a < b) {
        const tzr_tensor_info *ta = tzr_reader_tensor(p->r, a), *tb = tzr_reader_tensor(p->r, b - 1);
        *lo = ta->header_offset, *hi = tb->data_offset + tb->data_length;
    }
}

/* O_DIRECT: on when asked, or (auto) when the source supports it and the
 * data is not in the page cache, where bypassing it saves a copy and keeps
 * the cache for others; a warm cache is faster buffered. */
static int choose_direct(pipeline *p, tzr_source *src) {
    int want = p->opt->direct_io == TZR_DIRECT_ON;
    if (p->opt->direct_io == TZR_DIRECT_AUTO && src->set_direct && src->is_cached) {
        uint64_t lo, hi;
        read_span(p, &lo, &hi);
        if (hi > lo) want = !src->is_cached(src, lo, hi - lo);
    }
    if (!want) return 0;
    if (!src->set_direct || !src->direct_align) {
        if (p->opt->direct_io == TZR_DIRECT_ON)
            return tzr_fail(TZR_ENOTSUP, "%s: this source cannot read with O_DIRECT", src->name);
        return 0;
    }
    int rc = src->set_direct(src, 1);
    if (rc) return p->opt->direct_io == TZR_DIRECT_ON ? rc : 0;
    p->direct_align = src->direct_align;
    p->direct_was_set = 1;
    return 0;
}

static int sel_check(const tzr_byte_selection *s, const tzr_tensor_info *t, const char *what) {
    uint64_t last;
    int ok = s->run > 0 && s->count > 0 && s->outer_count > 0 && (s->count == 1 || s->stride >= s->run);
    uint64_t group = ok ? (s->count - 1) * s->stride + s->run : 0;
    ok = ok && (s->count == 1 || (s->count - 1) <= UINT64_MAX / s->stride) &&
         (s->outer_count == 1 || s->outer_stride >= group) &&
         tzr_mul_ok(s->outer_count - 1, s->outer_count == 1 ? 0 : s->outer_stride, &last) &&
         tzr_add_ok(last, group, &last) && tzr_add_ok(last, s->offset, &last) && last <= t->nbytes;
    if (ok) return 0;
    return tzr_fail(TZR_EINVAL, "%s: byte selection (offset %llu, %llu x %llu runs of %llu bytes) is not inside its %llu "
                    "bytes or overlaps itself", what, (unsigned long long)s->offset, (unsigned long long)s->outer_count,
                    (unsigned long long)s->count, (unsigned long long)s->run, (unsigned long long)t->nbytes);
}

static pipeline *pipeline_new(tzr_reader *r, tzr_sink *sink, const tzr_load_options *opt) {
    pipeline *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->r = r;
    p->sink = sink;
    p->opt = opt;
    p->verify = opt->verify >= 0 ? opt->verify : tzr_reader_verifying(r);
    p->verify_sha = opt->verify_level != TZR_VERIFY_CRC32;
    /* Only decryption and expansion need every header after its check
     * (a verify keeps those of tensors in several pieces: header_kept);
     * not keeping 100k parsed copies saves time. */
    p->keep_headers = tzr_reader_encrypted(r) || tzr_reader_compressed(r);
    p->n = tzr_reader_count(r);
    pthread_mutex_init(&p->slot_lock, NULL);
    pthread_cond_init(&p->slot_cond, NULL);
    pthread_mutex_init(&p->err_lock, NULL);
    pthread_mutex_init(&p->key_lock, NULL);
    pthread_mutex_init(&p->report_lock, NULL);
    pthread_mutex_init(&p->progress_lock, NULL);
    for (int k = 0; k < TENSOR_LOCKS; k++) pthread_mutex_init(&p->tensor_locks[k], NULL);
    return p;
}

/* Staging and hash state go before the error is handed to the caller (a
 * sink's free_staging must not be able to overwrite it). */
static void release(pipeline *p) {
    for (int s = 0; p->slots && s < p->nslots; s++) {
        if (!p->slots[s].buf) continue;
        if (p->sink->free_staging) p->sink->free_staging(p->sink, p->slots[s].buf, p->slot_size);
        else free(p->slots[s].buf);
        p->slots[s].buf = NULL;
    }
    for (size_t i = 0; p->th && i < p->n; i++)
        if (p->th[i].hs_live) tzr_hasher_free(&p->th[i].hs), p->th[i].hs_live = 0;
}

static void pipeline_free(pipeline *p) {
    for (size_t k = 0; k < p->nbads; k++) free(p->bads[k].msg);
    free(p->bads);
    free(p->bad);
    free(p->sel);
    free(p->has_sel);
    tzr_unmap_zeroed(p->ts, p->n ? p->n : 1, sizeof *p->ts);
    free(p->th);
    if (p->hdr_want != p->want) free(p->hdr_want);
    free(p->want);
    free(p->pieces);
    free(p->piece_crc);
    free(p->units);
    free(p->slots);
    pthread_mutex_destroy(&p->slot_lock);
    pthread_cond_destroy(&p->slot_cond);
    pthread_mutex_destroy(&p->err_lock);
    pthread_mutex_destroy(&p->key_lock);
    pthread_mutex_destroy(&p->report_lock);
    pthread_mutex_destroy(&p->progress_lock);
    for (int k = 0; k < TENSOR_LOCKS; k++) pthread_mutex_destroy(&p->tensor_locks[k]);
    free(p);
}

/* The filter's tensors, their byte selections and totals. */
static int select_tensors(pipeline *p) {
    const tzr_load_options *opt = p->opt;
    size_t n1 = p->n ? p->n : 1;
    p->ts = tzr_map_zeroed(n1, sizeof *p->ts);
    p->want = tzr_calloc_big(n1, 1);
    if (p->verify) p->th = tzr_calloc_big(n1, sizeof *p->th);
    int go_on = opt->struct_size >= offsetof(tzr_load_options, on_tensor_error_ctx) + sizeof(void *) &&
                opt->on_tensor_error;
    if (go_on) p->bad = tzr_calloc_big(n1, sizeof *p->bad);
    if (!p->ts || !p->want || (p->verify && !p->th) || (go_on && !p->bad)) return tzr_fail(TZR_ENOMEM, "out of memory");
    int selecting = opt->struct_size >= offsetof(tzr_load_options, select_ctx) + sizeof(void *) && opt->select;
    if (selecting) {
        p->sel = tzr_alloc_big(n1 * sizeof *p->sel);
        p->has_sel = tzr_calloc_big(n1, 1);
        if (!p->sel || !p->has_sel) return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    /* Every tensor, as is: the reader's totals, no pass over its table. */
    if (!opt->filter && !selecting &&
        tzr_reader_totals(p->r, &p->total_bytes, &p->stored_bytes, &p->nempty) == 0) {
        memset(p->want, 1, p->n);
        p->nselected = p->nrequested = p->n;
        return 0;
    }
    int rc = 0;
    for (size_t i = 0; !rc && i < p->n; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
        p->want[i] = !opt->filter || opt->filter(opt->filter_ctx, i, t);
        if (p->want[i] && selecting && opt->select(opt->select_ctx, i, t, &p->sel[i])) {
            char what[TZR_NAMEBUF + 256];
            rc = sel_check(&p->sel[i], t, tzr_reader_what(p->r, i, what, sizeof what));
            p->has_sel[i] = 1;
        }
        if (p->want[i]) {
            const tzr_byte_selection *sel = selection(p, i);
            p->total_bytes += sel ? sel->run * sel_runs(sel) : t->nbytes;
            p->stored_bytes += t->data_length;
            p->nselected++;
            p->nempty += t->data_length == 0;
        }
    }
    p->nrequested = p->nselected;
    return rc;
}

/* Phase 1: the headers planning needs, in parallel (remote sources).
 * Plaintext files need none to plan: each unit read carries its tensors'
 * headers. Encrypted ones need the crypt chunk sizes first, compressed
 * ones without a frame directory their frame tables. A compressed file
 * with a directory has its tables already: this reads only the headers
 * no unit will carry (tensors stored raw or without data, and headers too
 * large to add to a read), so every header of a compressed file is still
 * checked. A verifying load also needs the hashes of tensors without
 * data, which no unit carries: read here, side by side, rather than one
 * after another (a request each on S3) while destinations are set up. */
static int read_headers(pipeline *p, int nthreads) {
    tzr_reader *r = p->r;
    p->header_batch = p->n / (4 * (size_t)nthreads);
    if (p->header_batch < 1) p->header_batch = 1;
    if (p->header_batch > HEADER_BATCH) p->header_batch = HEADER_BATCH;
    p->headers_read = tzr_reader_encrypted(r) || (tzr_reader_compressed(r) && !tzr_reader_has_dir(r));
    p->hdr_want = p->want;
    int some_headers = 0, rc = 0;
    if (!p->headers_read && (tzr_reader_compressed(r) || p->verify || p->has_sel)) {
        p->hdr_want = tzr_calloc_big(p->n ? p->n : 1, 1);
        if (!p->hdr_want) return tzr_fail(TZR_ENOMEM, "out of memory");
        for (size_t i = 0; i < p->n; i++) {
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            int no_unit = t->data_length == 0 ||
                          (tzr_reader_compressed(r) && (!tzr_codec_find(t->compression) ||
                                                        t->data_offset - t->header_offset > MAX_INLINE_HEADER));
            /* a selection's reads need not start at the header */
            no_unit |= load_plans_selected(p, t, i);
            p->hdr_want[i] = p->want[i] && no_unit;
            some_headers |= p->hdr_want[i];
        }
    }
    if (p->headers_read || some_headers) rc = load_run_threads(p, nthreads, load_header_worker, NULL);
    /* Tensors whose header failed are reported, not planned. */
    for (size_t i = 0; !rc && p->bad && i < p->n; i++)
        if (p->want[i] && load_is_bad(p, i)) {
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            p->want[i] = 0;
            if (p->hdr_want != p->want) p->hdr_want[i] = 0;
            const tzr_byte_selection *sel = selection(p, i);
            p->total_bytes -= sel ? sel->run * sel_runs(sel) : t->nbytes;
            p->stored_bytes -= t->data_length;
            p->nselected--;
        }
    return rc;
}

/* Slots: as many as the ring budget holds (bounded by what the threads
 * can use), each the largest unit's read plus, for compressed units, the
 * expanded frames and byte-plane scratch, inside the same budget. */
static int size_ring(pipeline *p, const plan_policy *pol, tzr_source *src, int nthreads, size_t nunits) {
    size_t ring = pol->ring;
    if (p->slot_size < pol->chunk) p->slot_size = pol->chunk;
    int rc = choose_direct(p, src);
    p->slot_size += p->direct_align;
    if (p->zout_max) {
        p->zout_at = p->slot_size;
        p->slot_size += p->zout_max + p->zscratch_max;
    }
    /* Encrypted chunks (2 MiB from tensorizer) cannot be split: a smaller
     * budget grows to two of them rather than failing. */
    if (p->slot_size > ring / 2 && p->slot_size <= MAX_FORCED_SLOT) ring = 2 * p->slot_size;
    if (!rc && p->slot_size > ring / 2)
        rc = tzr_fail(TZR_ELIMIT, "%s: a tensor needs a %zu-byte read, above half the %zu-byte ring budget",
                      src->name, p->slot_size, ring);
    if (rc) return rc;
    p->nslots = (int)(ring / p->slot_size);
    /* A synchronous sink frees a slot once its unit is processed: one per
     * thread and two spare suffice, and every further slot would only cost
     * first-touch page faults. */
    int most = p->sink->fence ? SLOTS_PER_THREAD * nthreads : nthreads + 2;
    if (p->nslots > most) p->nslots = most;
    if (p->nslots < 2) p->nslots = 2;
    if ((size_t)p->nslots > nunits) p->nslots = nunits ? (int)nunits : 1;
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    if (!p->slots) return tzr_fail(TZR_ENOMEM, "out of memory");
    for (int s = 0; s < p->nslots; s++) p->slots[s].unit = -1;
    return 0;
}

/* Destinations (reserve, begin_tensor, tensors without data), before any
 * unit runs. */
int load_bind_tensors(pipeline *p) {
    tzr_sink *sink = p->sink;
    int rc = 0;
    if (sink->reserve && (rc = sink->reserve(sink, p->nselected, p->total_bytes))) return load_fail(p, rc);
    /* A pass over every tensor's info (memory-bound on 100k tensors) only
     * where it does something. */
    for (size_t i = 0; (sink->begin_tensor || p->nempty) && i < p->n; i++) {
        if (!p->want[i]) continue;
        const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
        if (sink->begin_tensor) rc = sink->begin_tensor(sink, i, t);
        if (!rc && t->data_length == 0 && (rc = load_fill_empty(p, i, t))) rc = load_tensor_fail(p, rc, i);
        if (rc) return load_fail_at(p, rc, i);
    }
    return 0;
}

/* Each staged unit the sink can take in place becomes DIRECT or SCATTER,
 * and compressed ones expand in place where they can. */
void load_bind_unit(pipeline *p, size_t u) {
    tzr_sink *sink = p->sink;
    tzr_source *src = tzr_reader_source(p->r);
    unit *un = &p->units[u];
    piece *pc = &p->pieces[un->first];
    if (unit_compressed(un)) {
        /* Expanded pieces follow one another in the output area (a
         * pack's pieces carry their offset in it from planning). */
        un->expand_in_place = sink->direct != NULL;
        for (size_t k = 0; k < un->count; k++) {
            piece *q = &p->pieces[un->first + k];
            q->uoff = p->zout_at + (un->kind == UNIT_PACK ? q->uoff : 0);
            if (un->expand_in_place)
                un->expand_in_place = sel_holds(p, q->tensor, q->toff, q->len) &&
                                      sink->direct(sink, q->tensor, q->toff, q->len) != NULL;
        }
        return;
    }
    int direct = un->count == 1 && pc->uoff == 0 && un->len == pc->len && sink->direct &&
                 sel_holds(p, pc->tensor, pc->toff, pc->len) &&
                 sink->direct(sink, pc->tensor, pc->toff, pc->len) != NULL;
    /* Many small plaintext tensors: scatter them in place with one
     * vectored read instead of staging plus a copy each. Whether every
     * piece has its place in the sink is asked when the unit is read
     * (scatter_read, on the workers, staging it otherwise): asked here
     * too, it was one more call per tensor on this one thread. */
    int scatter = !direct && un->count > 1 && src->readv_at && sink->direct && !tzr_reader_encrypted(p->r) &&
                  !tzr_reader_compressed(p->r) && !p->direct_align;
    un->kind = direct ? UNIT_DIRECT : scatter ? UNIT_SCATTER : UNIT_STAGED;
}

static int bind_destinations(pipeline *p) {
    int rc = load_bind_tensors(p);
    for (size_t u = 0; !rc && u < p->nunits; u++) load_bind_unit(p, u);
    return rc;
}

/* Overlapped planning: plan a unit at a time, publishing each (and the
 * tensors planned whole) to the workers. */
typedef struct overlap_ctx {
    const plan_policy *pol;
    plan_state *st;
} overlap_ctx;

/* Tests: called after each unit is published, to hold planning back (so
 * workers catch up) or fail it part way (a nonzero code). */
int (*tzr_load_plan_hook)(size_t units);

static void plan_overlapped(pipeline *p, void *arg) {
    overlap_ctx *c = arg;
    int rc = 0;
    while (!rc && !load_stopped(p)) {
        rc = load_plan_local_step(p, c->pol, c->st, p->nunits + 1);
        if (rc) {
            load_fail(p, rc);
            break;
        }
        int done = c->st->i >= p->n && !c->st->open_unit;
        atomic_store_explicit(&p->planned_to, done ? p->n : load_plan_local_done_below(p, c->st), memory_order_release);
        atomic_store_explicit(&p->units_ready, p->nunits, memory_order_release);
        pthread_mutex_lock(&p->slot_lock);
        pthread_cond_broadcast(&p->slot_cond);
        pthread_mutex_unlock(&p->slot_lock);
        if (done) break;
        if (tzr_load_plan_hook && (rc = tzr_load_plan_hook(p->nunits)))
            load_fail(p, tzr_fail(rc, "planning stopped after %zu units", p->nunits));
    }
}

/* Overlap planning with the run: local plaintext loads (units then fit a
 * slot sized up front, and the plan's bound is exact), unless
 * TZR_PLAN_OVERLAP=0. */
static int can_overlap(pipeline *p, const plan_policy *pol, int nthreads) {
    const char *env = getenv("TZR_PLAN_OVERLAP");
    if (env && strcmp(env, "0") == 0) return 0;
    tzr_reader *r = p->r;
    return nthreads >= 2 && !pol->pack_reads && !tzr_reader_encrypted(r) && !tzr_reader_compressed(r) && !p->has_sel &&
           !p->verify && !p->headers_read && pol->ring >= 2 * (pol->chunk + OVERLAP_HDR_ROOM) &&
           16 + p->nselected + p->stored_bytes / pol->chunk <= ((size_t)1 << 22); /* arrays at the bound */
}

/* Wait every outstanding fence (also after a failure, so no copy still
 * reads a slot we free), then retire the last units in order. */
static void drain(pipeline *p) {
    tzr_sink *sink = p->sink;
    for (int s = 0; p->slots && s < p->nslots; s++) {
        slot *sl = &p->slots[s];
        /* A unit stopped part way (a failure elsewhere) has submitted
         * pieces but no fence yet: fence the slot now, the workers are
         * done, so its copies end before the slot is freed. */
        if (!sl->has_fence && sink->fence && sl->buf && sl->unit >= 0 && !sl->processed)
            sl->has_fence = sink->fence(sink, s, &sl->fence) == 0;
        if (sl->has_fence) {
            int wrc = sink->wait(sink, sl->fence);
            sl->has_fence = 0;
            if (wrc && !atomic_load(&p->failed)) load_fail(p, wrc);
        }
    }
    if (atomic_load(&p->failed)) return;
    size_t lo = p->nunits > (size_t)p->nslots ? p->nunits - (size_t)p->nslots : 0;
    for (size_t u = lo; u < p->nunits; u++) {
        slot *sl = &p->slots[u % (size_t)p->nslots];
        if (sl->unit == (long)u && sl->processed) load_retire_unit(p, u);
    }
    if (!atomic_load(&p->failed) && p->next_report < p->n)
        load_fail(p, tzr_fail(TZR_EIO, "internal error: %zu of %zu tensors not completed", p->n - p->next_report, p->n));
}

/* The load's status: its first error, or (loads that go on past bad
 * tensors) the first bad tensor once everything else is in. */
static int result(pipeline *p) {
    int rc = atomic_load(&p->failed) ? p->err_code : 0;
    if (rc || !p->nbads) return rc;
    bad_tensor *first = &p->bads[0];
    for (size_t k = 1; k < p->nbads; k++)
        if (p->bads[k].tensor < first->tensor) first = &p->bads[k];
    rc = tzr_fail(first->code, "%zu of %zu tensors failed their checks; the first: %s", p->nbads, p->nrequested,
                  first->msg);
    tzr_error_about(tzr_reader_tensor(p->r, first->tensor)->name);
    tzr_error_keep(&p->err);
    p->err_code = rc;
    p->err_tensor = first->tensor;
    return rc;
}

/* Local loads' default thread count; tools ask for it rather than repeat it. */
int tzr_load_default_threads(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 2 ? 2 : cpus > 16 ? 16 : (int)cpus;
}

int tzr_load(tzr_reader *r, tzr_sink *sink, const tzr_load_options *opt_in, tzr_load_stats *stats) {
    tzr_load_options o = TZR_LOAD_OPTIONS_INIT;
    int orc = TZR_OPTS(tzr_load_options, o, opt_in, offsetof(tzr_load_options, on_tensor_error));
    if (orc) return orc;
    const tzr_load_options *opt = &o;
    if (o.verify_level != TZR_VERIFY_FULL && o.verify_level != TZR_VERIFY_CRC32)
        return tzr_fail(TZR_EINVAL, "tzr_load: unknown verify_level %d", o.verify_level);
    if (!r || !sink || !sink->submit) return tzr_fail(TZR_EINVAL, "tzr_load: NULL reader or incomplete sink");
    if (sink->fence && !sink->wait) return tzr_fail(TZR_EINVAL, "tzr_load: sink has fence() without wait()");
    if (opt->verify > 0 && tzr_reader_format(r) == TZR_FORMAT_SAFETENSORS)
        return tzr_fail(TZR_ENOTSUP, "%s: a safetensors file stores no hashes to verify (load it with verify 0)",
                        tzr_reader_source(r)->name);
    double t0 = now();
    pipeline *p = pipeline_new(r, sink, opt);
    if (!p) return tzr_fail(TZR_ENOMEM, "out of memory");
    tzr_source *src = tzr_reader_source(r);
    plan_policy pol = {0};
    /* Pinned staging's smaller ring, except where SHA-256 verification
     * runs: each tensor hashes in order on one core, so only a ring that
     * holds many tensors at once keeps every core hashing. */
    int pinned = sink->alloc_staging != NULL && !(p->verify && p->verify_sha);
    pol.chunk = opt->chunk_bytes     ? opt->chunk_bytes
                : src->preferred_chunk ? src->preferred_chunk
                : pinned               ? DEFAULT_PINNED_CHUNK
                                       : DEFAULT_CHUNK;
    if (pol.chunk < 4096) pol.chunk = 4096;
    pol.pack_reads = src->pack_reads;
    int nthreads = opt->threads > 0 ? opt->threads : src->preferred_inflight;
    if (nthreads <= 0) nthreads = tzr_load_default_threads();
    if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
    pol.ring = opt->ring_bytes ? opt->ring_bytes : pinned ? DEFAULT_PINNED_RING : DEFAULT_RING;
    if (!opt->ring_bytes && pinned && pol.ring / nthreads < pol.chunk) pol.ring = pol.chunk * (size_t)nthreads;
    if (pol.ring < 2 * pol.chunk) pol.ring = 2 * pol.chunk;
    pol.taper = nthreads;

    int rc = select_tensors(p);
    if (!rc) rc = read_headers(p, nthreads);
    pol.last_comp = (size_t)-1;
    /* (A scan of every tensor's info: only where tensors can be compressed.) */
    for (size_t i = tzr_reader_compressed(r) ? p->n : 0; i-- > 0 && !rc;)
        if (p->want[i] && tzr_codec_find(tzr_reader_tensor(r, i)->compression)) {
            pol.last_comp = i;
            break;
        }
    if (!rc && can_overlap(p, &pol, nthreads)) {
        plan_state st;
        p->overlap = 1;
        rc = load_plan_begin(p, &pol, &st, 1);
        st.slot_cap = pol.chunk + OVERLAP_HDR_ROOM;
        p->slot_size = (size_t)st.slot_cap;
        if (!rc) rc = size_ring(p, &pol, src, nthreads, st.ucap);
        overlap_ctx c = {&pol, &st};
        if (rc) load_fail(p, rc);
        else load_run_overlapped(p, nthreads, plan_overlapped, &c);
    } else {
        if (!rc) rc = load_plan(p, &pol);
        /* Encrypted files are left out: their tensors carry no CRC32. */
        if (!rc && p->verify && !p->verify_sha && !tzr_reader_encrypted(r) &&
            !(p->piece_crc = malloc((p->npieces ? p->npieces : 1) * sizeof *p->piece_crc)))
            rc = tzr_fail(TZR_ENOMEM, "out of memory");
        if (!rc) rc = size_ring(p, &pol, src, nthreads, p->nunits);
        if (!rc) rc = bind_destinations(p);
        if (rc) {
            load_fail(p, rc);
        } else {
            pthread_mutex_lock(&p->report_lock);
            load_report_ready(p); /* tensors with no data */
            pthread_mutex_unlock(&p->report_lock);
            if (!atomic_load(&p->failed)) load_run_threads(p, nthreads, load_worker, load_check_end_marker);
        }
    }
    drain(p);
    rc = result(p);
    if (p->direct_was_set) src->set_direct(src, 0);
    release(p);
    if (stats) {
        tzr_load_stats st = {0};
        st.tensors = p->nselected;
        st.bytes = atomic_load(&p->bytes_done);
        st.bytes_read = atomic_load(&p->bytes_read);
        st.reads = atomic_load(&p->reads);
        st.staging_bytes = p->staging_bytes;
        st.seconds = now() - t0;
        st.error_tensor = rc ? p->err_tensor : (size_t)-1;
        tzr_opts_put(stats, &st, offsetof(tzr_load_stats, struct_size), sizeof st);
    }
    if (rc) {
        p->err.code = p->err_code;
        tzr_error_put(&p->err);
    }
    pipeline_free(p);
    return rc;
}

void tzr_sink_free(tzr_sink *s) {
    TZR_KEEP_ERROR;
    if (s && s->destroy) s->destroy(s);
}
