/* Differential: a Hugging Face model.safetensors.index.json read as libtzr
 * reads it (the hand scan of shard_hf_index.c first) against jansson's
 * tree alone. Both must give the same weight map (names in the index's
 * order, each one's file, the files sorted), or fail with the same code
 * and message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard_internal.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) __builtin_trap(); \
    } while (0)

static int parse(const uint8_t *data, size_t size, int scan, shard_hf_map *m, char *msg, size_t cap) {
    char *text = malloc(size ? size : 1);
    REQUIRE(text);
    memcpy(text, data, size);
    int rc = shard_hf_index_parse("m.json", text, size, scan, m);
    snprintf(msg, cap, "%s", rc ? tzr_last_error() : "");
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    shard_hf_map a, b;
    char ma[1024], mb[1024];
    int ra = parse(data, size, 1, &a, ma, sizeof ma);
    int rb = parse(data, size, 0, &b, mb, sizeof mb);
    REQUIRE(ra == rb);
    if (ra) {
        REQUIRE(strcmp(ma, mb) == 0);
        return 0;
    }
    REQUIRE(a.n == b.n && a.nfiles == b.nfiles);
    for (size_t k = 0; k < a.nfiles; k++) {
        REQUIRE(strcmp(a.files[k], b.files[k]) == 0);
        REQUIRE(k == 0 || strcmp(a.files[k - 1], a.files[k]) < 0);
    }
    for (size_t i = 0; i < a.n; i++) {
        REQUIRE(strcmp(a.names[i], b.names[i]) == 0);
        REQUIRE(a.file[i] == b.file[i] && a.file[i] < a.nfiles);
    }
    shard_hf_map_free(&a);
    shard_hf_map_free(&b);
    return 0;
}
