/* Shared by writer.c (open, add from memory, close) and writer_stream.c
 * (tzr_writer_add_from: records whose data worker threads read, hash,
 * seal and write): the writer, and one tensor record in the making. */
#ifndef TZR_WRITER_INTERNAL_H
#define TZR_WRITER_INTERNAL_H

#include "compress.h"
#include "crypt.h"
#include "format.h"
#include "hash.h"

#include <pthread.h>

#define MAX_WRITE ((size_t)1 << 30)

/* One tensor's record: placed (index entry written) by begin, its header
 * completed and written by end. */
typedef struct writer_record {
    uint8_t *hdr;            /* hash and MAC slots filled as the data goes */
    size_t hsize;
    tzr_header_slots slots;
    tzr_hasher hs;
    int hs_live;
    int enc, compressed;
    uint8_t nonce[TZR_NONCE_BYTES];
    uint64_t hdr_at, data_at;
    uint64_t data_length;    /* uncompressed bytes */
    uint64_t stored_len;
    uint32_t itemsize;
    uint8_t sha256[32];      /* after end */
} writer_record;

typedef struct write_job write_job;

/* Small records built in memory and written as one run of consecutive
 * records (the sizes, the reason and the TZR_WRITER_RUNS switch:
 * util/write_runs.h). A record of at most TZR_RUN_SMALL bytes (header and
 * data) joins a run; a run is at most TZR_RUN_BYTES and RUN_RECORDS
 * records (the worker path queues a run's records as one job list). */
#define RUN_RECORDS 512

typedef struct writer_run {
    uint8_t *buf;            /* TZR_RUN_BYTES, allocated on first use */
    uint64_t at;             /* file offset of buf[0] */
    size_t len;              /* bytes built so far */
    size_t count;            /* records in it */
    char first[TZR_NAMEBUF], last[TZR_NAMEBUF]; /* for messages */
} writer_run;

struct tzr_writer {
    tzr_output *out;
    uint64_t meta_size;
    int meta_given;          /* metadata_size set by the caller: reserve keeps it */
    uint8_t *index;
    size_t index_used;
    uint64_t pos;
    uint32_t version;
    int encrypted;
    int with_kdf;
    uint8_t key[32];
    uint64_t opslimit, memlimit;
    uint8_t salt[TZR_SALT_BYTES];
    uint64_t tensor_size, count;
    int compress;            /* a codec: every header gets a compression block */
    int codec;               /* its codec table id (codec.h) */
    int level, planes_mode, threads;
    uint32_t frame_size;
    uint8_t *dir;            /* frame directory: every compression block so far */
    size_t dir_len, dir_cap;
    int dir_full;            /* it outgrew the index reservation: not written */
    char **names;            /* open-addressing set for duplicate checks */
    size_t *name_lens;
    size_t nslots;
    int failed;
    uint8_t last_sha256[32]; /* the header SHA-256 of the last tensor added */
    int runs;                /* build small records into runs (writer_run) */
    writer_run run;          /* tzr_writer_add's run (the calling thread's) */
    /* tzr_writer_add_from (writer_stream.c): started on first use. */
    int workers_wanted;      /* threads; 0: CPUs (at most 16) */
    pthread_t *workers;
    int nworkers;
    pthread_mutex_t jlock;
    pthread_cond_t jwork, jroom;
    write_job *qhead, *qtail;
    write_job *pending, *pending_tail; /* a run of small records not yet queued */
    uint64_t pending_end;    /* file offset just past the pending run */
    size_t pending_bytes, pending_count;
    size_t queued;
    int stop;                /* no more jobs: workers finish the queue and exit */
    int cancel;              /* abort: workers drop what is left */
    int job_rc;              /* the first worker failure */
    char job_msg[1000];
};

TZR_HIDDEN int writer_put(tzr_writer *w, const void *buf, uint64_t len, uint64_t off);
/* z == NULL: only check the description (rec gets data_length and
 * itemsize); otherwise place the record (see writer.c). */
TZR_HIDDEN int writer_record_begin(tzr_writer *w, const tzr_tensor_desc *d, int have_data, const tzr_zdata *z,
                                   writer_record *rec);
TZR_HIDDEN int writer_record_data(tzr_writer *w, writer_record *rec, const uint8_t *bytes, uint64_t n, uint64_t off,
                                  uint8_t *bounce);
/* The same, into memory: the stored bytes go to dst (the record's data
 * area inside a run), hashed and sealed, nothing written. */
TZR_HIDDEN int writer_record_fill(tzr_writer *w, writer_record *rec, const uint8_t *bytes, uint64_t n, uint64_t off,
                                  uint8_t *dst);
/* ok == 0: only free. */
TZR_HIDDEN int writer_record_end(tzr_writer *w, writer_record *rec, int ok);
/* Hashes into the header, the header copied to dst (its place in a run);
 * frees the record. */
TZR_HIDDEN void writer_record_end_into(writer_record *rec, uint8_t *dst);
/* Whether a record joins a run. */
TZR_HIDDEN int writer_run_takes(const tzr_writer *w, const writer_record *rec);
/* Whether a record of n bytes at `at` joins a run of `count` records and
 * len bytes from run_at: it follows them, and the run has room for it. */
TZR_HIDDEN int writer_run_extends(uint64_t run_at, size_t len, size_t count, uint64_t at, size_t n);
/* Where in r the record goes (its header first): r is written out first
 * when the record does not follow it or does not fit. NULL: that write
 * failed (the message names r's tensors) or no memory. */
TZR_HIDDEN uint8_t *writer_run_place(tzr_writer *w, writer_run *r, const writer_record *rec, const char *name,
                                     int *rc);
/* Write r out as one piece (nothing when empty); a failure names its
 * first and last tensors. */
TZR_HIDDEN int writer_run_flush(tzr_writer *w, writer_run *r);
/* Finish (cancel: drop) the queued records and join the workers; returns
 * the first worker failure with its message. */
TZR_HIDDEN int writer_stream_finish(tzr_writer *w, int cancel);
#endif
