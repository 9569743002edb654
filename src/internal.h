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
/* Copy of this thread's message, for handing errors between threads. */
TZR_HIDDEN void tzr_error_save(char *buf, size_t cap, int *code);
TZR_HIDDEN void tzr_error_restore(const char *msg, int code);

/* Overflow-checked arithmetic: return 0 on overflow. */
static inline int tzr_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline int tzr_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

/* Write a name for messages: printable, escaped, cut to a sane length. */
TZR_HIDDEN const char *tzr_printable(const char *bytes, size_t len, char *buf, size_t cap);
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
