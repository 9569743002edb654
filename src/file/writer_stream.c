/* tzr_writer_add_from: the writer's pipeline. The calling thread places
 * each record (its header size and data length are known from the
 * description, so its offset is fixed and the output stays byte for byte
 * what tzr_writer_add would write) and queues it; worker threads take
 * records from the queue and read their bytes from the source in chunks
 * into a buffer of their own, hash them (CRC32 and SHA-256), seal them
 * when encrypting, and write them at their place with positional writes,
 * then write the completed header. Several tensors are in flight at once,
 * so one tensor's hashing overlaps another's I/O, and host memory is the
 * workers' buffers whatever the model size. tzr_writer_add_borrowed
 * queues the caller's memory the same way, with no copy. Small records
 * are queued as runs of consecutive ones (writer_internal.h): the worker
 * builds a run in its run buffer (the caller's memory is copied there) and
 * writes it with one write. */
#include "thread.h"
#include "writer_internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STREAM_CHUNK ((size_t)4 * TZR_CRYPT_CHUNK) /* whole crypt chunks: 8 MiB */
#define QUEUE_PER_WORKER 4

struct write_job {
    writer_record rec;
    tzr_source *src;       /* the bytes: read from src at src_off, */
    uint64_t src_off;
    const uint8_t *mem;    /* or, when set, the caller's (borrowed) memory */
    uint8_t *sha_out; /* NULL, or where the header SHA-256 goes once written */
    char name[TZR_NAMEBUF];
    write_job *next;
    write_job *more;  /* the next record of this job's run */
};

/* Free a job and the rest of its run, their records unwritten. */
static void drop_jobs(tzr_writer *w, write_job *j) {
    while (j) {
        write_job *more = j->more;
        writer_record_end(w, &j->rec, 0);
        free(j);
        j = more;
    }
}

/* A run: each record built in r (bytes read straight into their place,
 * hashed and sealed there), then the run written at once. */
static int run_small(tzr_writer *w, write_job *j, writer_run *r) {
    int rc = 0;
    for (; j; j = j->more) {
        if (!rc && __atomic_load_n(&w->cancel, __ATOMIC_RELAXED)) rc = tzr_fail(TZR_ECANCELED, "write canceled");
        uint8_t *p = rc ? NULL : writer_run_place(w, r, &j->rec, j->name, &rc);
        size_t n = (size_t)j->rec.data_length;
        uint8_t *data = p ? p + j->rec.hsize : NULL;
        if (p && !j->mem && (rc = j->src->read_at(j->src, data, n, j->src_off)))
            rc = tzr_fail_prefix(rc, "%s: tensor '%s': reading its bytes at input offset %llu: ", w->out->name,
                                 j->name, (unsigned long long)j->src_off);
        else if (p && (rc = writer_record_fill(w, &j->rec, j->mem ? j->mem : data, n, 0, data)))
            rc = tzr_fail_prefix(rc, "tensor '%s': ", j->name);
        if (p && !rc) {
            writer_record_end_into(&j->rec, p);
            if (j->sha_out) memcpy(j->sha_out, j->rec.sha256, 32);
        } else {
            writer_record_end(w, &j->rec, 0);
        }
    }
    if (!rc) return writer_run_flush(w, r);
    r->len = r->count = 0;
    return rc;
}

static int run_job(tzr_writer *w, write_job *j, uint8_t *buf, uint8_t *bounce) {
    int rc = 0;
    for (uint64_t off = 0; off < j->rec.data_length && !rc;) {
        if (__atomic_load_n(&w->cancel, __ATOMIC_RELAXED)) {
            rc = tzr_fail(TZR_ECANCELED, "write canceled");
            break; /* the record is still freed below */
        }
        size_t n = j->rec.data_length - off < STREAM_CHUNK ? (size_t)(j->rec.data_length - off) : STREAM_CHUNK;
        if (j->mem) { /* hashed and written from the caller's memory: no copy */
            rc = writer_record_data(w, &j->rec, j->mem + off, n, off, bounce);
            if (rc) rc = tzr_fail_prefix(rc, "tensor '%s': ", j->name);
            off += n;
            continue;
        }
        rc = j->src->read_at(j->src, buf, n, j->src_off + off);
        if (rc) {
            rc = tzr_fail_prefix(rc, "%s: tensor '%s': reading its bytes at input offset %llu: ", w->out->name,
                                 j->name, (unsigned long long)(j->src_off + off));
            break;
        }
        rc = writer_record_data(w, &j->rec, buf, n, off, bounce);
        if (rc) rc = tzr_fail_prefix(rc, "tensor '%s': ", j->name);
        off += n;
    }
    int erc = writer_record_end(w, &j->rec, rc == 0);
    if (!rc && !erc && j->sha_out) memcpy(j->sha_out, j->rec.sha256, 32);
    return rc ? rc : erc;
}

static void *worker(void *arg) {
    tzr_writer *w = arg;
    uint8_t *buf = malloc(STREAM_CHUNK), *bounce = w->encrypted ? malloc(TZR_CRYPT_CHUNK) : NULL;
    int nomem = !buf || (w->encrypted && !bounce);
    writer_run run = {0};
    pthread_mutex_lock(&w->jlock);
    for (;;) {
        while (!w->qhead && !w->stop) pthread_cond_wait(&w->jwork, &w->jlock);
        if (!w->qhead) break;
        write_job *j = w->qhead;
        w->qhead = j->next;
        if (!w->qhead) w->qtail = NULL;
        w->queued--;
        pthread_cond_broadcast(&w->jroom);
        int skip = w->cancel || w->job_rc;
        pthread_mutex_unlock(&w->jlock);
        int rc = 0;
        if (skip) drop_jobs(w, j);
        else if (nomem) rc = tzr_fail(TZR_ENOMEM, "out of memory (writer buffers)"), drop_jobs(w, j);
        else if (j->more || writer_run_takes(w, &j->rec)) {
            rc = run_small(w, j, &run);
            for (write_job *more; j; j = more) more = j->more, free(j);
        } else {
            rc = run_job(w, j, buf, bounce);
            free(j);
        }
        pthread_mutex_lock(&w->jlock);
        if (rc && !w->job_rc) {
            int code = rc;
            tzr_error_save(w->job_msg, sizeof w->job_msg, &code);
            w->job_rc = rc;
            pthread_cond_broadcast(&w->jroom);
        }
    }
    pthread_mutex_unlock(&w->jlock);
    if (bounce) memset(bounce, 0, TZR_CRYPT_CHUNK);
    free(buf);
    free(bounce);
    free(run.buf);
    return NULL;
}

static int start_workers(tzr_writer *w) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = w->workers_wanted > 0 ? w->workers_wanted : cpus < 1 ? 1 : cpus > 16 ? 16 : (int)cpus;
    w->workers = calloc((size_t)n, sizeof *w->workers);
    if (!w->workers) return tzr_fail(TZR_ENOMEM, "out of memory");
    pthread_mutex_init(&w->jlock, NULL);
    pthread_cond_init(&w->jwork, NULL);
    pthread_cond_init(&w->jroom, NULL);
    for (; w->nworkers < n; w->nworkers++)
        if (tzr_thread_start(&w->workers[w->nworkers], worker, w) != 0) break;
    if (w->nworkers == 0) {
        free(w->workers);
        w->workers = NULL;
        pthread_mutex_destroy(&w->jlock);
        pthread_cond_destroy(&w->jwork);
        pthread_cond_destroy(&w->jroom);
        return tzr_fail(TZR_ENOMEM, "cannot start writer threads");
    }
    return 0;
}

static void queue_job(tzr_writer *w, write_job *j) {
    if (w->qtail) w->qtail->next = j;
    else w->qhead = j;
    w->qtail = j;
    w->queued++;
    pthread_cond_signal(&w->jwork);
}

/* The pending run to the workers (call with jlock held). */
static void queue_pending(tzr_writer *w) {
    if (w->pending) queue_job(w, w->pending);
    w->pending = w->pending_tail = NULL;
    w->pending_bytes = w->pending_count = 0;
}

int writer_stream_finish(tzr_writer *w, int cancel) {
    if (!w->workers) return 0;
    pthread_mutex_lock(&w->jlock);
    if (cancel) {
        drop_jobs(w, w->pending);
        w->pending = NULL;
    }
    queue_pending(w);
    w->stop = 1;
    if (cancel) __atomic_store_n(&w->cancel, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&w->jwork);
    pthread_mutex_unlock(&w->jlock);
    for (int k = 0; k < w->nworkers; k++) pthread_join(w->workers[k], NULL);
    free(w->workers);
    w->workers = NULL;
    w->nworkers = 0;
    pthread_mutex_destroy(&w->jlock);
    pthread_cond_destroy(&w->jwork);
    pthread_cond_destroy(&w->jroom);
    if (!w->job_rc || cancel) return 0;
    tzr_error_restore(w->job_msg, w->job_rc);
    return w->job_rc;
}

/* A compressed writer needs the whole tensor (frames, and whether it
 * shrinks at all): read it, then write it as from memory. */
static int add_whole(tzr_writer *w, const tzr_tensor_desc *d, tzr_source *src, uint64_t offset, uint64_t nbytes) {
    void *buf = malloc(nbytes ? (size_t)nbytes : 1);
    if (!buf) return tzr_fail(TZR_ENOMEM, "cannot allocate %llu bytes", (unsigned long long)nbytes);
    int rc = nbytes ? src->read_at(src, buf, (size_t)nbytes, offset) : 0;
    if (rc) {
        char nb[TZR_NAMEBUF];
        rc = tzr_fail_prefix(rc, "%s: tensor '%s': reading its bytes at input offset %llu: ", w->out->name,
                             tzr_printable(d->name, d->name_len, nb, sizeof nb), (unsigned long long)offset);
    }
    if (!rc) rc = tzr_writer_add(w, d, buf);
    free(buf);
    return rc;
}

int tzr_writer_add_from(tzr_writer *w, const tzr_tensor_desc *d, tzr_source *src, uint64_t offset) {
    return tzr_writer_add_from_sha(w, d, src, offset, NULL);
}

static int enqueue(tzr_writer *w, const tzr_tensor_desc *d, tzr_source *src, uint64_t offset, const void *mem,
                   uint8_t *sha_out);

int tzr_writer_add_from_sha(tzr_writer *w, const tzr_tensor_desc *d, tzr_source *src, uint64_t offset,
                            uint8_t sha_out[32]) {
    if (!w || !d || !src) return tzr_fail(TZR_EINVAL, "NULL writer, tensor or source");
    return enqueue(w, d, src, offset, NULL, sha_out);
}

int tzr_writer_add_borrowed(tzr_writer *w, const tzr_tensor_desc *d, const void *data) {
    if (!w || !d) return tzr_fail(TZR_EINVAL, "NULL writer or tensor");
    return enqueue(w, d, NULL, 0, data, NULL);
}

/* Queue a record for the workers: its bytes from src, or from mem. */
static int enqueue(tzr_writer *w, const tzr_tensor_desc *d, tzr_source *src, uint64_t offset, const void *mem,
                   uint8_t *sha_out) {
    if (w->failed) return tzr_fail(TZR_ECANCELED, "%s: an earlier write failed", w->out->name);
    writer_record rec;
    int rc = writer_record_begin(w, d, 1, NULL, &rec); /* checks only */
    if (rc) return rc;
    if ((w->compress && rec.data_length) || !rec.data_length || d->meta) { /* nothing to stream */
        rc = src ? add_whole(w, d, src, offset, rec.data_length) : tzr_writer_add(w, d, mem);
        if (!rc && sha_out) tzr_writer_last_sha256(w, sha_out);
        return rc;
    }
    if (!mem && !src) return tzr_fail(TZR_EINVAL, "tensor data is NULL");
    if (!w->workers && (rc = start_workers(w))) return rc;
    write_job *j = calloc(1, sizeof *j);
    if (!j) return tzr_fail(TZR_ENOMEM, "out of memory");
    /* Bounded queue: the caller waits while the workers are this far behind. */
    pthread_mutex_lock(&w->jlock);
    while (w->queued >= (size_t)(QUEUE_PER_WORKER * w->nworkers) && !w->job_rc)
        pthread_cond_wait(&w->jroom, &w->jlock);
    int failed = w->job_rc != 0;
    pthread_mutex_unlock(&w->jlock);
    if (failed) {
        free(j);
        w->failed = 1;
        return writer_stream_finish(w, 0);
    }
    rc = writer_record_begin(w, d, 1, &(tzr_zdata){0}, &j->rec);
    if (rc) {
        free(j);
        if (rc != TZR_EINVAL && rc != TZR_EDUP && rc != TZR_ELIMIT) w->failed = 1;
        return rc;
    }
    j->src = src;
    j->src_off = offset;
    j->mem = mem;
    j->sha_out = sha_out;
    tzr_printable(d->name, d->name_len, j->name, sizeof j->name);
    pthread_mutex_lock(&w->jlock);
    if (writer_run_takes(w, &j->rec)) { /* joins the pending run, which goes when it cannot grow */
        size_t n = (size_t)(j->rec.hsize + j->rec.stored_len);
        if (w->pending && !writer_run_extends(w->pending_end - w->pending_bytes, w->pending_bytes, w->pending_count,
                                              j->rec.hdr_at, n))
            queue_pending(w);
        if (w->pending_tail) w->pending_tail->more = j;
        else w->pending = j;
        w->pending_tail = j;
        w->pending_end = j->rec.data_at + j->rec.stored_len;
        w->pending_bytes += n;
        w->pending_count++;
    } else {
        queue_pending(w); /* keeps the records roughly in file order */
        queue_job(w, j);
    }
    pthread_mutex_unlock(&w->jlock);
    return 0;
}
