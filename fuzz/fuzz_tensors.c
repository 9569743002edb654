/* libFuzzer target for the .tensors reader: open an arbitrary byte string
 * (headers read and checked at open, verify on), read every tensor and
 * verify it. Bad input must give an error code, never a crash, a hang or a
 * huge allocation. Encrypted inputs are also opened with the fixed key
 * 00..1f (the key of the small encrypted seeds). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tzr.h"

#define MAX_TOTAL ((uint64_t)64 << 20) /* cap on what one input may make us allocate */

static const uint8_t KEY[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

/* Returns the open code; reads and verifies every tensor when it opened. */
static int exercise(const uint8_t *data, size_t size, int with_key, int *encrypted) {
    tzr_source *src = NULL;
    if (tzr_source_open_memory(&src, data, size, "fuzz") != 0) return TZR_EINVAL;
    tzr_reader_options o = TZR_READER_OPTIONS_INIT;
    o.verify = 1;
    o.read_headers = 1;
    if (with_key) o.crypt.key = KEY;
    tzr_reader *r = NULL;
    int rc = tzr_reader_open_source(&r, src, &o);
    if (rc) {
        /* Every failure carries a message. */
        if (tzr_last_error()[0] == 0 || tzr_last_error_code() != rc) abort();
        return rc;
    }
    *encrypted = tzr_reader_encrypted(r);
    uint64_t total = 0;
    size_t n = tzr_reader_count(r);
    for (size_t i = 0; i < n; i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        if (!t || !t->name) abort();
        size_t idx;
        if (tzr_reader_find(r, t->name, t->name_len, &idx) != 0 || idx != i) abort();
        if (t->nbytes > MAX_TOTAL - total) continue;
        total += t->nbytes;
        uint8_t *buf = malloc(t->nbytes ? (size_t)t->nbytes : 1);
        if (!buf) continue;
        int rr = tzr_reader_read(r, i, buf, (size_t)t->nbytes);
        if (rr && (tzr_last_error()[0] == 0 || tzr_last_error_code() != rr)) abort();
        free(buf);
        int vr = tzr_reader_verify(r, i);
        if (vr && (tzr_last_error()[0] == 0 || tzr_last_error_code() != vr)) abort();
    }
    tzr_reader_free(r);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int encrypted = 0;
    int rc = exercise(data, size, 0, &encrypted);
    /* A key on an unencrypted file is refused, so only retry with the key
     * when the file is (or may be) encrypted. */
    if ((rc == 0 && encrypted) || rc == TZR_ECRYPT) exercise(data, size, 1, &encrypted);
    return 0;
}
