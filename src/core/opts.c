/* Option structs across library versions (tzr.h: "Option structs start
 * with struct_size"). A caller built against an older header passes a
 * shorter struct: its fields are read, the rest keep their defaults. */
#include "internal.h"

#include <string.h>

int tzr_opts_take(void *copy, size_t ours, size_t first, const void *given, const char *type) {
    if (!given) return 0; /* NULL: the defaults already in copy */
    size_t n;
    memcpy(&n, given, sizeof n); /* struct_size is every options struct's first field */
    if (n < first || n > ours)
        return tzr_fail(TZR_EINVAL,
                        "%s: struct_size %zu is not a size this library knows (%zu to %zu bytes); "
                        "initialise it with its *_INIT macro",
                        type, n, first, ours);
    memcpy(copy, given, n);
    memcpy(copy, &ours, sizeof ours); /* the copy is whole now */
    return 0;
}

void tzr_opts_put(void *dst, const void *src, size_t base, size_t ours) {
    memcpy(dst, src, base);
    size_t from = base + sizeof(size_t);
    if (ours <= from) return; /* nothing after struct_size: never read it */
    size_t n;
    memcpy(&n, (const char *)dst + base, sizeof n);
    if (n > ours) n = ours;
    if (n > from) memcpy((char *)dst + from, (const char *)src + from, n - from);
}
