#include "text_buf.h"

#include <stdlib.h>
#include <string.h>

int tzr_text_put(tzr_text *b, const char *s, size_t n) {
    if (n + 1 > b->cap - b->len) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap - b->len < n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}
