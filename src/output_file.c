/* Atomic local output: write a temporary file beside the target, fsync it,
 * rename it over the target, fsync the directory. Until finish the target
 * path is untouched; abort and failures remove the temporary file. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct file_output {
    tzr_output base;
    int fd;
    char *path;
    char *tmp;
} file_output;

static int fo_pwrite(tzr_output *o, const void *buf, size_t len, uint64_t off) {
    file_output *f = (file_output *)o;
    const char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(f->fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return tzr_fail(TZR_EIO, "%s: write of %zu bytes at offset %llu failed: %s", f->path,
                            len, (unsigned long long)off, strerror(errno));
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static int fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy) return tzr_fail(TZR_ENOMEM, "out of memory");
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (dfd < 0) return 0; /* best effort: the rename already happened */
    fsync(dfd);
    close(dfd);
    return 0;
}

static int fo_finish(tzr_output *o) {
    file_output *f = (file_output *)o;
    if (fsync(f->fd) != 0) {
        int e = errno;
        unlink(f->tmp);
        return tzr_fail(TZR_EIO, "%s: fsync failed: %s", f->path, strerror(e));
    }
    close(f->fd);
    f->fd = -1;
    if (rename(f->tmp, f->path) != 0) {
        int e = errno;
        unlink(f->tmp);
        return tzr_fail(TZR_EIO, "%s: rename from temporary file failed: %s", f->path, strerror(e));
    }
    free(f->tmp);
    f->tmp = NULL;
    return fsync_dir_of(f->path);
}

static void fo_abort(tzr_output *o) {
    file_output *f = (file_output *)o;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    f->tmp = NULL;
}

static void fo_destroy(tzr_output *o) {
    file_output *f = (file_output *)o;
    if (!f) return;
    fo_abort(o);
    free(f->path);
    free(f);
}

int tzr_output_open_file(tzr_output **out, const char *path) {
    *out = NULL;
    if (!path || !*path) return tzr_fail(TZR_EINVAL, "empty output path");
    file_output *f = calloc(1, sizeof *f);
    if (!f) return tzr_fail(TZR_ENOMEM, "out of memory");
    f->fd = -1;
    f->path = strdup(path);
    size_t n = strlen(path) + 32;
    f->tmp = malloc(n);
    if (!f->path || !f->tmp) {
        fo_destroy(&f->base);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    /* Same directory as the target so rename is atomic. */
    char *copy = strdup(path);
    if (!copy) {
        fo_destroy(&f->base);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    char *base = basename(copy);
    char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    snprintf(f->tmp, n, "%.*s.%s.tmp.XXXXXX", dirlen, path, base);
    free(copy);
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        free(f->tmp);
        f->tmp = NULL;
        fo_destroy(&f->base);
        return tzr_fail(TZR_EIO, "%s: cannot create temporary file: %s", path, strerror(e));
    }
    /* mkstemp makes 0600; give the usual umask-derived mode. */
    mode_t um = umask(0);
    umask(um);
    fchmod(f->fd, 0666 & ~um);
    f->base.pwrite_at = fo_pwrite;
    f->base.finish = fo_finish;
    f->base.abort = fo_abort;
    f->base.destroy = fo_destroy;
    f->base.name = f->path;
    f->base.ctx = f;
    *out = &f->base;
    return 0;
}
