/* libtzr: read and write Hugging Face `.safetensors` files.
 *
 * Same conventions as tzr.h: functions return 0 or a negative TZR_E* code
 * and set the thread's message (tzr_last_error()); every *_free(NULL) is a
 * no-op; the library never prints or aborts. See formats/safetensors.md for
 * the layout and the exact validation rules.
 *
 * Reader: the whole header is parsed and validated at open; afterwards
 * every accessor is a plain lookup and the handle may be shared between
 * threads for reading. Tensor data is not copied: tzr_st_data points into
 * the mapping (tzr_st_open) or into the caller's bytes (tzr_st_parse).
 * Data pointers are only as aligned as the file makes them.
 *
 * Writer: not thread-safe; serialise calls on one writer.
 */
#ifndef TZR_SAFETENSORS_H
#define TZR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tzr.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header (JSON) length accepted and written: 100,000,000 bytes,
 * the bound of the safetensors library itself. */
#define TZR_ST_MAX_HEADER ((uint64_t)100000000)

/* One tensor. From the reader every pointer stays valid while the file
 * handle lives. Given to the writer only name, name_len, dtype (or, when
 * dtype is TZR_DTYPE_UNKNOWN, st_dtype), ndim, shape and nbytes are used. */
typedef struct tzr_st_tensor {
    const char *name;      /* UTF-8, NUL-terminated copy */
    size_t name_len;
    const char *st_dtype;  /* safetensors dtype name: "BF16" */
    tzr_dtype dtype;
    uint32_t ndim;         /* 0 for a scalar */
    const uint64_t *shape; /* ndim entries */
    uint64_t data_offset;  /* absolute offset in the file */
    uint64_t nbytes;       /* numel * item size */
} tzr_st_tensor;

typedef struct tzr_st_file tzr_st_file;

/* Map a local file read-only and parse it. Empty files and files whose
 * tensors all have zero bytes are handled (the first is TZR_ETRUNC). */
TZR_API int tzr_st_open(tzr_st_file **out, const char *path);
/* Parse bytes the caller keeps alive and unchanged while the handle lives.
 * name (may be NULL) is used in messages only. */
TZR_API int tzr_st_parse(tzr_st_file **out, const void *bytes, size_t len, const char *name);
/* Parse from the first `have` bytes of a file of file_size bytes read
 * elsewhere (a source): they must hold the whole header (8 + its length;
 * TZR_EINVAL names how many are needed). Offsets are checked against
 * file_size; tzr_st_data returns NULL. */
TZR_API int tzr_st_parse_header(tzr_st_file **out, const void *head, size_t have, uint64_t file_size,
                                const char *name);
TZR_API size_t tzr_st_count(const tzr_st_file *f);
/* Tensor i, ordered by data offset ("file order"); tensors with equal
 * offsets (zero-byte ones) keep their JSON order. NULL when out of range. */
TZR_API const tzr_st_tensor *tzr_st_get(const tzr_st_file *f, size_t i);
/* First byte of tensor i's data (nbytes may be 0), NULL when out of range. */
TZR_API const void *tzr_st_data(const tzr_st_file *f, size_t i);
/* Index (file order) of the tensor with exactly these name bytes, or
 * TZR_ENOTFOUND. */
TZR_API int tzr_st_find(const tzr_st_file *f, const char *name, size_t name_len, size_t *index);
/* The "__metadata__" string pairs, in JSON order. */
TZR_API size_t tzr_st_metadata_count(const tzr_st_file *f);
TZR_API int tzr_st_metadata_get(const tzr_st_file *f, size_t i, const char **key,
                                const char **value);
TZR_API void tzr_st_free(tzr_st_file *f);

/* safetensors dtype name of a libtzr dtype ("BF16"); NULL when safetensors
 * has no equivalent (C32, C128, the FNUZ float8 types, bits8/16). */
TZR_API const char *tzr_st_dtype_name(tzr_dtype d);
/* libtzr dtype of a safetensors dtype name; TZR_ENOTSUP for names this
 * library cannot represent (F4, F6_E2M3, F6_E3M2) or does not know. */
TZR_API int tzr_st_dtype_parse(const char *s, tzr_dtype *d);

/* Writer. Declare every tensor at open; the header is written then. Data
 * is laid out contiguously in the given order (not re-sorted the way the
 * Rust serializer sorts by alignment and name), so put may be called for
 * any tensor and range, in any order, any number of times. */
typedef struct tzr_st_writer tzr_st_writer;

/* output is owned by the writer from now on (aborted and freed on failure
 * here too). Names must be non-empty UTF-8 without NUL bytes, distinct and
 * not "__metadata__"; nbytes must equal numel * item size. Metadata keys
 * and values are NUL-terminated UTF-8; n_meta == 0 writes no
 * "__metadata__" entry. */
TZR_API int tzr_st_writer_open(tzr_st_writer **out, tzr_output *output,
                               const tzr_st_tensor *tensors, size_t n,
                               const char *const *meta_keys, const char *const *meta_values,
                               size_t n_meta);
/* Write len bytes of tensor i starting off_in_tensor bytes into it. */
TZR_API int tzr_st_writer_put(tzr_st_writer *w, size_t i, uint64_t off_in_tensor,
                              const void *data, size_t len);
/* Check that every byte of every tensor was put, finish the output (an
 * atomic rename for tzr_output_open_file) and free w. On failure the
 * output is aborted: nothing is left at the target. */
TZR_API int tzr_st_writer_close(tzr_st_writer *w);
/* Discard everything and free w. */
TZR_API void tzr_st_writer_abort(tzr_st_writer *w);

#ifdef __cplusplus
}
#endif
#endif
