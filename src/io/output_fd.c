/* Output over a caller's open descriptor (a binding's file object): the
 * bytes go where the caller said, in place, so nothing is atomic; a failed
 * write truncates the file back to what it held at open. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fd_output {
    tzr_output base;
    int fd;        /* our duplicate */
    off_t length0; /* the file's length at open, restored by abort */
    char *name;
} fd_output;

static int fdo_pwrite(tzr_output *o, const void *buf, size_t len, uint64_t off) {
    fd_output *f = (fd_output *)o;
    const char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(f->fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return tzr_fail(TZR_EIO, "%s: write of %zu bytes at offset %llu failed: %s", f->name, len,
                            (unsigned long long)off, strerror(errno));
        }
        p += n, len -= (size_t)n, off += (uint64_t)n;
    }
    return 0;
}

static int fdo_finish(tzr_output *o) {
    fd_output *f = (fd_output *)o;
    /* Delayed write errors (a full disk on NFS, ENOSPC at writeback) only
     * surface here; EINVAL: a file that cannot be synced (fine). */
    if (fdatasync(f->fd) != 0 && errno != EINVAL)
        return tzr_fail(TZR_EIO, "%s: flushing the written file failed: %s", f->name, strerror(errno));
    return 0;
}

static void fdo_abort(tzr_output *o) {
    fd_output *f = (fd_output *)o;
    if (ftruncate(f->fd, f->length0) != 0) { /* best effort: the write already failed */ }
}

static void fdo_destroy(tzr_output *o) {
    fd_output *f = (fd_output *)o;
    close(f->fd);
    free(f->name);
    free(f);
}

int tzr_output_open_fd(tzr_output **out, int fd, const char *name) {
    *out = NULL;
    if (!name) name = "(file descriptor)";
    int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return tzr_fail(TZR_EINVAL, "%s: descriptor %d: %s", name, fd, strerror(errno));
    struct stat st;
    int acc = fcntl(dup, F_GETFL);
    const char *why = NULL;
    if (fstat(dup, &st) != 0 || !S_ISREG(st.st_mode)) why = "not a regular file";
    else if (acc < 0 || (acc & O_ACCMODE) == O_RDONLY) why = "not open for writing";
    else if (acc & O_APPEND) why = "open for appending (writes must land at their offsets)";
    if (why) {
        close(dup);
        return tzr_fail(TZR_EINVAL, "%s: descriptor %d is %s", name, fd, why);
    }
    fd_output *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name))) {
        free(f);
        close(dup);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    f->fd = dup;
    f->length0 = st.st_size;
    f->base.pwrite_at = fdo_pwrite;
    f->base.struct_size = sizeof f->base;
    f->base.finish = fdo_finish;
    f->base.abort = fdo_abort;
    f->base.destroy = fdo_destroy;
    f->base.name = f->name;
    f->base.ctx = f;
    *out = &f->base;
    return 0;
}
