/* The codec table (codec.h): a new codec adds its row here. */
#include "codec.h"

#include <stdio.h>
#include <string.h>

static const tzr_codec *const BUILTIN[] = {&tzr_codec_zstd};

static const tzr_codec *const *rows = BUILTIN;
static size_t nrows = sizeof BUILTIN / sizeof BUILTIN[0];

void tzr_codec_table_use(const tzr_codec *const *r, size_t n) {
    rows = r ? r : BUILTIN;
    nrows = r ? n : sizeof BUILTIN / sizeof BUILTIN[0];
}

const tzr_codec *tzr_codec_find(int id) {
    if (id <= 0) return NULL;
    for (size_t k = 0; k < nrows; k++)
        if ((int)rows[k]->id == id) return rows[k];
    return NULL;
}

const char *tzr_compression_name(int id) {
    if (id == TZR_COMPRESSION_NONE) return "none";
    const tzr_codec *c = tzr_codec_find(id);
    return c ? c->name : NULL;
}

int tzr_codec_unknown(int id) {
    char known[128] = "";
    size_t at = 0;
    for (size_t k = 0; k < nrows && at < sizeof known; k++)
        at += (size_t)snprintf(known + at, sizeof known - at, "%s%s %u", k ? ", " : "", rows[k]->name, rows[k]->id);
    return tzr_fail(TZR_EFORMAT, "unknown compression codec %d (this library knows: %s)", id,
                    nrows ? known : "none");
}
