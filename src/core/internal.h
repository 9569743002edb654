/* Internal helpers shared by every libtzr source file. */
#ifndef TZR_INTERNAL_H
#define TZR_INTERNAL_H

#include "tzr.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#define TZR_HIDDEN __attribute__((visibility("hidden")))
#define TZR_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Record code and message as this thread's last error; returns code so a
 * failing path can `return tzr_fail(TZR_EFORMAT, "...")`. */
TZR_HIDDEN int tzr_fail(int code, const char *fmt, ...) TZR_PRINTF(2, 3);
TZR_HIDDEN int tzr_vfail(int code, const char *fmt, va_list ap);
/* Prefix this thread's current message with more context ("tensor 'x': "). */
TZR_HIDDEN int tzr_fail_prefix(int code, const char *fmt, ...) TZR_PRINTF(2, 3);
/* Clear the thread's error (successful public calls need not). */
TZR_HIDDEN void tzr_clear_error(void);
/* A failure tied to a tensor (its printable name, or NULL) and a byte
 * offset (TZR_NO_OFFSET: none): readable with tzr_last_error_tensor/_offset,
 * so code decides on these, never on the message text. */
TZR_HIDDEN int tzr_fail_at(int code, const char *tensor, uint64_t offset, const char *fmt, ...)
    TZR_PRINTF(4, 5);
/* Attach a tensor / offset to the current failure (NULL / TZR_NO_OFFSET
 * leave that part as it is); tzr_fail_prefix keeps them too. */
TZR_HIDDEN void tzr_error_where(const char *tensor, uint64_t offset);
/* The next tzr_fail* in this thread concerns this tensor (its printable
 * name): the helper that writes "tensor 'x'" into messages calls it, so
 * every message naming a tensor records it. */
TZR_HIDDEN void tzr_error_about(const char *tensor);
/* Mark the current failure with a TZR_CAUSE_* (cleared by the next fail). */
TZR_HIDDEN void tzr_error_set_cause(int cause);
/* Copy of this thread's message, for handing errors between threads. */
TZR_HIDDEN void tzr_error_save(char *buf, size_t cap, int *code);
TZR_HIDDEN void tzr_error_restore(const char *msg, int code);

/* The whole error state of a thread: for handing a failure to another
 * thread, and for cleanup that must not overwrite the failure it follows. */
#define TZR_ERR_MSG_CAP 1024
typedef struct tzr_error_state {
    int code;
    int cause;
    uint64_t offset;
    char tensor[256];
    char msg[TZR_ERR_MSG_CAP];
} tzr_error_state;
TZR_HIDDEN void tzr_error_keep(tzr_error_state *s);
TZR_HIDDEN void tzr_error_put(const tzr_error_state *s);
/* First statement of every free/abort/close-after-failure: the thread's
 * error is put back when the function returns, whatever the callbacks it
 * runs (a source's destroy, an output's abort) record meanwhile. */
#define TZR_KEEP_ERROR                                                                    \
    tzr_error_state tzr_kept_error_ __attribute__((cleanup(tzr_error_scope_leave))); \
    tzr_error_scope_enter(&tzr_kept_error_)
TZR_HIDDEN void tzr_error_scope_enter(tzr_error_state *s);
TZR_HIDDEN void tzr_error_scope_leave(const tzr_error_state *s);
/* Cleanup that leaves something behind (an S3 upload it could not abort)
 * adds that to the failure it follows instead of replacing it: appended to
 * the message when the outermost TZR_KEEP_ERROR puts it back (at once when
 * none is active). */
TZR_HIDDEN void tzr_error_note(const char *fmt, ...) TZR_PRINTF(1, 2);

/* Every public entry point taking an options struct reads it through this:
 * `copy` holds the defaults (the struct's *_INIT); opt may be NULL (the
 * defaults), else its struct_size must lie between `first` (the size of
 * the struct's first published version) and ours, else TZR_EINVAL naming
 * the struct. The caller's struct_size bytes are copied over the defaults,
 * so fields an older caller lacks keep them. Then read only `copy`:
 *     tzr_reader_options o = TZR_READER_OPTIONS_INIT;
 *     int rc = TZR_OPTS(tzr_reader_options, o, opt, sizeof o);
 *     opt = &o; */
TZR_HIDDEN int tzr_opts_take(void *copy, size_t ours, size_t first, const void *given, const char *type);
/* Fill a caller's output struct (tzr_load_stats) from a whole one: its
 * first layout, the bytes before its struct_size at `base`, always; the
 * fields after struct_size only as far as the caller's struct_size covers
 * them (a struct from an older header is never written past its end). */
TZR_HIDDEN void tzr_opts_put(void *dst, const void *src, size_t base, size_t ours);
/* (The sizeof terms only make the compiler check copy, opt and type agree.) */
#define TZR_OPTS(type, copy, opt, first)                                                    \
    tzr_opts_take(&(copy), sizeof(type) + 0 * sizeof((copy) = *(opt)) + 0 * sizeof((type *)0 == &(copy)), \
                  (first), (opt), #type)

/* The SHA-256 value written in the header of the last tensor added (it
 * covers the hashable header and the data: what a verifying reader checks). */
TZR_HIDDEN void tzr_writer_last_sha256(const tzr_writer *w, uint8_t out[32]);
/* tzr_writer_add_from that also reports the tensor's header SHA-256 into
 * sha_out (32 bytes the caller keeps) once its record is written: by
 * tzr_writer_close at the latest. */
TZR_HIDDEN int tzr_writer_add_from_sha(tzr_writer *w, const tzr_tensor_desc *d, tzr_source *src, uint64_t offset,
                                       uint8_t sha_out[32]);

/* Overflow-checked arithmetic: return 0 on overflow. */
static inline int tzr_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline int tzr_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

/* Write a name for messages: printable, escaped, cut to a sane length. */
TZR_HIDDEN const char *tzr_printable(const char *bytes, size_t len, char *buf, size_t cap);
/* What a non-regular file is, for messages: "a FIFO", "a directory", ... */
TZR_HIDDEN const char *tzr_file_kind(unsigned mode);
#define TZR_NAMEBUF 160

/* Little-endian loads and stores (no alignment assumed). */
static inline uint16_t tzr_ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t tzr_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t tzr_ld64(const uint8_t *p) {
    return (uint64_t)tzr_ld32(p) | (uint64_t)tzr_ld32(p + 4) << 32;
}
static inline void tzr_st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void tzr_st32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void tzr_st64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif
