/* Fuzz what names a set of files: a tzr shard manifest, a Hugging Face
 * model.safetensors.index.json, and an S3 ListObjectsV2 answer. The first
 * byte picks which; the rest is the document. Any input must open (the
 * files it names do not exist, so opening fails after the parse) or fail
 * cleanly with a message; a parsed listing's URLs must be well formed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_internal.h"
#include "tzr_shard.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) __builtin_trap(); \
    } while (0)

static char dir[64];
static void remove_dir(void) { rmdir(dir); }

/* The document as a file of this name in a directory of our own. */
static void open_as(const char *name, const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/tzr-fuzz-sets-XXXXXX");
        REQUIRE(mkdtemp(dir));
        atexit(remove_dir);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(data, 1, size, f) == size || size == 0);
    fclose(f);
    tzr_shard_set *s = NULL;
    int rc = tzr_shard_open(&s, path, NULL);
    if (rc) {
        REQUIRE(s == NULL);
        REQUIRE(tzr_last_error() && tzr_last_error()[0]);
    } else {
        for (size_t i = 0; i < tzr_shard_count(s); i++) REQUIRE(tzr_shard_tensor_at(s, i)->name);
        tzr_shard_close(s);
    }
    unlink(path);
}

static void listing(const uint8_t *data, size_t size) {
    char *body = malloc(size + 1);
    REQUIRE(body);
    memcpy(body, data, size);
    body[size] = 0; /* as tzr_http_perform hands it over */
    char **urls = NULL, *token = NULL;
    size_t n = 0, cap = 0;
    int more = 0;
    int rc = tzr_s3_list_page(body, size, "s3://b/p/", "b", "p/", 2, ".safetensors", &urls, &n, &cap, &more, &token);
    if (!rc) {
        for (size_t i = 0; i < n; i++) {
            size_t l = strlen(urls[i]);
            REQUIRE(strncmp(urls[i], "s3://b/", 7) == 0 && l > 19 && strcmp(urls[i] + l - 12, ".safetensors") == 0);
            REQUIRE(!strchr(urls[i] + 7 + 2, '/'));
        }
        REQUIRE(!more || token);
    }
    for (size_t i = 0; i < n; i++) free(urls[i]);
    free(urls);
    free(token);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: open_as("m.tzr-index.json", data + 1, size - 1); break;
    case 1: open_as("model.safetensors.index.json", data + 1, size - 1); break;
    default: listing(data + 1, size - 1); break;
    }
    return 0;
}
