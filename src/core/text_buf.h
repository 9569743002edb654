/* A growing byte string, NUL-terminated after every append (names built
 * for tensorizer, the shard manifest's text). */
#ifndef TZR_TEXT_BUF_H
#define TZR_TEXT_BUF_H
#include "internal.h"

#include <stddef.h>

typedef struct tzr_text {
    char *p; /* malloc'd; free() it */
    size_t len, cap;
} tzr_text;

/* Append n bytes of s: 0, or -1 when out of memory (b unchanged). */
TZR_HIDDEN int tzr_text_put(tzr_text *b, const char *s, size_t n);
#endif
