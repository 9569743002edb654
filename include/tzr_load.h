/* libtzr pipelined loader ("plaid"): many large positional reads in flight
 * into a fixed ring of staging slots, overlapping read, decrypt, hash and
 * the copy into the destination (host memory, nothing, or a CUDA device).
 * Host memory used by the pipeline is bounded by the ring budget, never by
 * tensor or file size. Only standard headers here. */
#ifndef TZR_LOAD_H
#define TZR_LOAD_H

#include "tzr.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ sinks */
/* Where loaded bytes land. The pipeline calls, per selected tensor:
 *   begin_tensor once, before any of its bytes;
 *   then for each piece either direct() (the sink hands out the final
 *   memory so the pipeline reads straight into it: host memory) or
 *   submit() (bytes sit in a staging slot; the sink copies them, maybe
 *   asynchronously); once a slot's pieces are all submitted, fence();
 *   wait(fence) before the staging slot is reused, and at the end;
 *   end_tensor once the tensor is complete.
 * A sink may be called from several pipeline threads at once. */
typedef struct tzr_sink tzr_sink;
struct tzr_sink {
    int (*begin_tensor)(tzr_sink *s, size_t index, const tzr_tensor_info *t);
    /* Final memory for bytes [off, off+len) of the tensor, so the pipeline
     * reads straight into it (host memory); NULL where not possible. */
    void *(*direct)(tzr_sink *s, size_t index, uint64_t off, uint64_t len);
    /* Copy len staged bytes to [off, off+len) of the tensor. `slot` names
     * the staging slot they sit in; the copy may still be running when
     * submit returns (the slot is not reused before its fence). */
    int (*submit)(tzr_sink *s, int slot, size_t index, uint64_t off, const void *src, size_t len);
    /* A fence covering every submit made so far from `slot`; NULL for
     * sinks whose submit is synchronous. */
    int (*fence)(tzr_sink *s, int slot, uint64_t *fence);
    /* Block until the fence has passed. */
    int (*wait)(tzr_sink *s, uint64_t fence);
    /* Called once all of a tensor's bytes are in place (after fences). */
    int (*end_tensor)(tzr_sink *s, size_t index, const tzr_tensor_info *t);
    /* Staging memory (pinned for CUDA). NULL: the pipeline uses malloc. */
    void *(*alloc_staging)(tzr_sink *s, size_t len);
    void (*free_staging)(tzr_sink *s, void *p, size_t len);
    void (*destroy)(tzr_sink *s); /* frees s itself */
    const char *name;
    void *ctx;
    /* Optional, called once before any begin_tensor with the number of
     * selected tensors and their total bytes, so a sink can allocate them
     * at once (one huge-page block, one cudaMalloc) instead of per tensor.
     * A sink that cannot should return 0 and allocate per tensor. */
    int (*reserve)(tzr_sink *s, size_t count, uint64_t bytes);
    size_t struct_size; /* sizeof(tzr_sink); 0: the fields above only (tzr.h) */
};

TZR_API void tzr_sink_free(tzr_sink *s);

/* Null sink: bytes are read (and decrypted/verified when asked), then
 * dropped. For verification and benchmarks. */
TZR_API int tzr_sink_null_new(tzr_sink **out);

/* Host sink. With dest == NULL the library allocates the tensors (packed,
 * 64-byte aligned, in large huge-page blocks that live until the sink is
 * freed; tzr_sink_host_data returns each). With dest set, it is asked once
 * per tensor for caller memory of t->nbytes bytes (return NULL to fail);
 * the caller owns that memory. */
typedef void *(*tzr_host_dest_fn)(void *ctx, size_t index, const tzr_tensor_info *t);
TZR_API int tzr_sink_host_new(tzr_sink **out, tzr_host_dest_fn dest, void *dest_ctx);
TZR_API int tzr_sink_host_data(tzr_sink *s, size_t index, void **data, uint64_t *len);

/* CUDA device sink: pinned staging slots, cudaMemcpyAsync on its own
 * streams, events as fences. The CUDA runtime is loaded at run time
 * (libcudart.so); without it or without a device: TZR_ENODEV. With
 * dest == NULL each tensor gets cudaMalloc'd memory on `device`; with dest
 * set, the callback returns a device pointer of t->nbytes bytes. */
typedef void *(*tzr_device_dest_fn)(void *ctx, size_t index, const tzr_tensor_info *t);
TZR_API int tzr_sink_cuda_new(tzr_sink **out, int device, tzr_device_dest_fn dest, void *dest_ctx);
/* Device pointer of a loaded tensor (library-allocated mode). */
TZR_API int tzr_sink_cuda_data(tzr_sink *s, size_t index, void **dev_ptr, uint64_t *len);
/* Bandwidth probe: pinned host-to-device cudaMemcpy of `bytes`, `reps`
 * times; returns GB/s (for benchmarks quoting the physical floor). */
TZR_API int tzr_cuda_h2d_bandwidth(int device, size_t bytes, int reps, double *gbps);

/* ---------------------------------------------------------------- loading */
typedef int (*tzr_filter_fn)(void *ctx, size_t index, const tzr_tensor_info *t);
/* Called in index order as each tensor is complete; a non-zero return
 * cancels the load with that code. */
typedef int (*tzr_tensor_done_fn)(void *ctx, size_t index, const tzr_tensor_info *t);
/* Called in index order for each tensor whose data or header fails its
 * checks (TZR_EHASH, TZR_ECRYPT, TZR_EFORMAT), with the code and the
 * message (naming the tensor and byte offset); return 0 to go on. */
typedef int (*tzr_tensor_error_fn)(void *ctx, size_t index, const tzr_tensor_info *t, int code, const char *message);
/* Part of a tensor's bytes: outer_count groups, outer_stride apart, of
 * count runs of `run` bytes, stride apart, the first at offset. Runs are
 * in ascending order and do not overlap (stride >= run, outer_stride >=
 * (count - 1) * stride + run). One range: count = outer_count = 1. A
 * slice of a row-major array along any dimension is one such selection. */
typedef struct tzr_byte_selection {
    uint64_t offset, run, stride, count, outer_stride, outer_count;
} tzr_byte_selection;
/* Fill *sel and return 1 to load only those bytes of tensor `index`;
 * return 0 for all of them. */
typedef int (*tzr_select_fn)(void *ctx, size_t index, const tzr_tensor_info *t, tzr_byte_selection *sel);
/* Progress: bytes of tensor data done so far and the total. */
typedef void (*tzr_progress_fn)(void *ctx, uint64_t done, uint64_t total);

enum { TZR_DIRECT_AUTO = 0, TZR_DIRECT_ON = 1, TZR_DIRECT_OFF = 2 };
/* What a verifying load checks. FULL: CRC32 and SHA-256, as tensorizer's
 * verify_hash. CRC32: CRC32 only, several times cheaper; it catches
 * accidental damage (bit flips, truncation, misplaced bytes) but, like
 * SHA-256 in an unencrypted file, not a deliberate change (neither is
 * keyed). Encrypted tensors store no CRC32: at this level only their
 * Poly1305 MACs, checked by every decryption, vouch for them; an
 * unencrypted tensor that stores no CRC32 gets its SHA-256 checked. */
enum { TZR_VERIFY_FULL = 0, TZR_VERIFY_CRC32 = 1 };

typedef struct tzr_load_options {
    size_t struct_size;
    size_t ring_bytes;        /* staging budget; default 256 MiB, 128 MiB for a sink with its own
                               * (pinned) staging such as the CUDA sink, whose allocation costs,
                               * unless SHA-256 verification needs many tensors in flight */
    size_t chunk_bytes;       /* read size; default 8 MiB (4 MiB with such a sink) */
    int threads;              /* pipeline threads; default from the source */
    int verify;               /* check CRC32/SHA-256 (default: the reader's) */
    int direct_io;            /* TZR_DIRECT_*: O_DIRECT for uncached files */
    tzr_filter_fn filter;     /* NULL: every tensor */
    void *filter_ctx;
    tzr_tensor_done_fn on_tensor;
    void *on_tensor_ctx;
    tzr_progress_fn progress;
    void *progress_ctx;
    volatile int *cancel;     /* set non-zero from anywhere to stop */
    /* Set: a tensor that fails its checks is reported here and the load
     * goes on with the others, reading every byte once (a verify that
     * reports every bad tensor in one pass). tzr_load still returns the
     * first such failure, once the rest is loaded. A wrong key or password
     * is not a tensor's failure: it stops the load at once. NULL: the
     * first failure stops the load. */
    tzr_tensor_error_fn on_tensor_error;
    void *on_tensor_error_ctx;
    /* Set: only the selected bytes of a tensor reach the sink (offsets
     * stay the tensor's; begin/end_tensor as usual; stats and progress
     * count the selected bytes). Plaintext that is not verified is read
     * run by run (runs less than 64 KiB apart in one read); encrypted
     * data in whole crypt chunks; compressed or verified tensors whole,
     * since frames and hashes cover them whole. */
    tzr_select_fn select;
    void *select_ctx;
    int verify_level;         /* TZR_VERIFY_FULL (0) or TZR_VERIFY_CRC32 */
} tzr_load_options;

#define TZR_LOAD_OPTIONS_INIT \
    { sizeof(tzr_load_options), 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* What a load did (for tools and benchmarks). */
typedef struct tzr_load_stats {
    uint64_t tensors;
    uint64_t bytes;           /* tensor bytes delivered */
    uint64_t bytes_read;      /* bytes read from the source (with gaps) */
    uint64_t reads;           /* read_at calls */
    size_t staging_bytes;     /* staging memory allocated */
    double seconds;
    size_t error_tensor;      /* tensor whose failure stopped the load, or
                                 (size_t)-1 when none or not tied to one */
    /* The caller's sizeof(tzr_load_stats), set before the call: fields
     * added after this one are filled only when it covers them (tzr.h). */
    size_t struct_size;
} tzr_load_stats;

/* Load the selected tensors of r into sink. On failure every slot is
 * released, no callback runs after the failure is known, the sink's
 * destinations of unfinished tensors hold unspecified bytes, and the
 * first error's code and message are returned (naming tensor and offset). */
TZR_API int tzr_load(tzr_reader *r, tzr_sink *sink, const tzr_load_options *opt, tzr_load_stats *stats);

/* The threads a load uses when its options leave threads 0 and its source
 * states no preference (local files): one per online CPU, 2 to 16. For
 * benchmarks whose floor must run on as many threads as the load. */
TZR_API int tzr_load_default_threads(void);

/* ------------------------------------------------------ table sinks */
/* Sinks over a caller-made table of destinations: tensor i (reader index)
 * lands at ptrs[i], which holds lens[i] bytes (>= its nbytes). The table
 * is copied; the memory stays the caller's. A tensor outside the table, a
 * NULL pointer for a tensor with bytes, or a short entry fails the load
 * with TZR_EINVAL naming the tensor. For callers that cannot run code per
 * tensor during a load (bindings that hold a lock to run their own). */
TZR_API int tzr_sink_host_table_new(tzr_sink **out, void *const *ptrs, const uint64_t *lens, size_t n);
/* The same with device pointers on CUDA device `device`. */
TZR_API int tzr_sink_cuda_table_new(tzr_sink **out, int device, void *const *ptrs, const uint64_t *lens,
                                    size_t n);
/* A tzr_filter_fn over a selection mask: ctx is an array of
 * tzr_reader_count(r) bytes, non-zero selects tensor i. */
TZR_API int tzr_filter_mask(void *ctx, size_t index, const tzr_tensor_info *t);

#ifdef __cplusplus
}
#endif
#endif
