/* Bounds-checked little-endian cursor over untrusted bytes. Every getter
 * fails (sets c->bad, returns 0/NULL) instead of reading past the end, so a
 * parser can read a whole structure and check c->bad once. */
#ifndef TZR_CURSOR_H
#define TZR_CURSOR_H

#include "internal.h"

typedef struct tzr_cursor {
    const uint8_t *p;
    size_t len;
    size_t pos;
    int bad;
} tzr_cursor;

static inline tzr_cursor tzr_cursor_make(const void *p, size_t len) {
    tzr_cursor c = {(const uint8_t *)p, len, 0, 0};
    return c;
}
static inline size_t tzr_cursor_left(const tzr_cursor *c) { return c->bad ? 0 : c->len - c->pos; }
static inline const uint8_t *tzr_cursor_take(tzr_cursor *c, size_t n) {
    if (c->bad || n > c->len - c->pos) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *p = c->p + c->pos;
    c->pos += n;
    return p;
}
static inline uint8_t tzr_get8(tzr_cursor *c) {
    const uint8_t *p = tzr_cursor_take(c, 1);
    return p ? p[0] : 0;
}
static inline uint16_t tzr_get16(tzr_cursor *c) {
    const uint8_t *p = tzr_cursor_take(c, 2);
    return p ? tzr_ld16(p) : 0;
}
static inline uint32_t tzr_get32(tzr_cursor *c) {
    const uint8_t *p = tzr_cursor_take(c, 4);
    return p ? tzr_ld32(p) : 0;
}
static inline uint64_t tzr_get64(tzr_cursor *c) {
    const uint8_t *p = tzr_cursor_take(c, 8);
    return p ? tzr_ld64(p) : 0;
}

#endif
