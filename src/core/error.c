/* The one error convention: negative codes plus a per-thread message. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* One thread's last failure: the message plus what it concerns, so callers
 * (and the library itself) never have to parse the text. */
static _Thread_local tzr_error_state cur = {0, 0, TZR_NO_OFFSET, {0}, {0}};
/* The tensor the next failure concerns (tzr_error_about). */
static _Thread_local char about[256];
#define last_msg cur.msg
#define last_code cur.code
_Static_assert(sizeof about == sizeof cur.tensor, "about is copied into cur.tensor");

const char *tzr_strerror(int code) {
    switch (code) {
    case TZR_OK: return "TZR_OK: success";
    case TZR_EINVAL: return "TZR_EINVAL: invalid argument";
    case TZR_ENOMEM: return "TZR_ENOMEM: out of memory";
    case TZR_EIO: return "TZR_EIO: I/O error";
    case TZR_EFORMAT: return "TZR_EFORMAT: malformed file";
    case TZR_EVERSION: return "TZR_EVERSION: unsupported data version or feature";
    case TZR_EHASH: return "TZR_EHASH: hash mismatch";
    case TZR_ECRYPT: return "TZR_ECRYPT: decryption failed or key missing";
    case TZR_ENOTFOUND: return "TZR_ENOTFOUND: not found";
    case TZR_ELIMIT: return "TZR_ELIMIT: size limit exceeded";
    case TZR_EDUP: return "TZR_EDUP: duplicate tensor name";
    case TZR_ETRUNC: return "TZR_ETRUNC: truncated input";
    case TZR_ENODEV: return "TZR_ENODEV: no CUDA device or runtime";
    case TZR_ECANCELED: return "TZR_ECANCELED: canceled";
    case TZR_ENOTSUP: return "TZR_ENOTSUP: not supported";
    case TZR_ENET: return "TZR_ENET: network error";
    case TZR_EHTTP: return "TZR_EHTTP: HTTP error";
    case TZR_ECHANGED: return "TZR_ECHANGED: object changed during load";
    case TZR_ECOMM: return "TZR_ECOMM: communication failure";
    case TZR_EDEVICE: return "TZR_EDEVICE: device error";
    default: return "TZR_E?: unknown error code";
    }
}

const char *tzr_last_error(void) { return last_msg; }
int tzr_last_error_code(void) { return last_code; }

const char *tzr_last_error_tensor(void) { return cur.tensor[0] ? cur.tensor : NULL; }
uint64_t tzr_last_error_offset(void) { return cur.offset; }
int tzr_last_error_cause(void) { return cur.cause; }

/* A new failure: it concerns the tensor announced by tzr_error_about (if
 * any); the offset is unknown until tzr_error_where says. */
int tzr_vfail(int code, const char *fmt, va_list ap) {
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    last_code = code;
    cur.cause = TZR_CAUSE_NONE;
    cur.offset = TZR_NO_OFFSET;
    memcpy(cur.tensor, about, sizeof about);
    about[0] = 0;
    return code;
}

void tzr_error_about(const char *tensor) { snprintf(about, sizeof about, "%s", tensor ? tensor : ""); }

void tzr_error_where(const char *tensor, uint64_t offset) {
    if (tensor) snprintf(cur.tensor, sizeof cur.tensor, "%s", tensor);
    if (offset != TZR_NO_OFFSET) cur.offset = offset;
}

void tzr_error_set_cause(int cause) { cur.cause = cause; }

int tzr_fail_at(int code, const char *tensor, uint64_t offset, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tzr_vfail(code, fmt, ap);
    va_end(ap);
    tzr_error_where(tensor, offset);
    return code;
}

int tzr_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tzr_vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

int tzr_set_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tzr_vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

int tzr_fail_prefix(int code, const char *fmt, ...) {
    char prefix[TZR_ERR_MSG_CAP], old[TZR_ERR_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_msg, sizeof old);
    /* Same failure, more context: where it happened stays as it was. */
    size_t n = strlen(prefix);
    if (n >= sizeof last_msg) n = sizeof last_msg - 1;
    memcpy(last_msg, prefix, n);
    size_t m = strlen(old);
    if (m > sizeof last_msg - 1 - n) m = sizeof last_msg - 1 - n;
    memcpy(last_msg + n, old, m);
    last_msg[n + m] = 0;
    last_code = code;
    if (about[0]) memcpy(cur.tensor, about, sizeof about);
    about[0] = 0;
    return code;
}

void tzr_clear_error(void) {
    about[0] = 0;
    last_msg[0] = 0;
    last_code = 0;
    cur.cause = TZR_CAUSE_NONE;
    cur.offset = TZR_NO_OFFSET;
    cur.tensor[0] = 0;
}

void tzr_error_keep(tzr_error_state *s) { *s = cur; }
void tzr_error_put(const tzr_error_state *s) { cur = *s; }

/* Notes wait for the outermost kept scope: an inner one's put-back would
 * be undone by the outer one's. */
static _Thread_local int keep_depth;
static _Thread_local char note[512];

static void note_append(void) {
    size_t l = strlen(last_msg);
    if (note[0]) snprintf(last_msg + l, sizeof last_msg - l, "%s", note);
    note[0] = 0;
}

void tzr_error_scope_enter(tzr_error_state *s) {
    *s = cur;
    keep_depth++;
}

void tzr_error_scope_leave(const tzr_error_state *s) {
    cur = *s;
    if (--keep_depth == 0) note_append();
}

void tzr_error_note(const char *fmt, ...) {
    size_t l = strlen(note);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note + l, sizeof note - l, fmt, ap);
    va_end(ap);
    if (keep_depth == 0) note_append();
}

void tzr_error_save(char *buf, size_t cap, int *code) {
    snprintf(buf, cap, "%s", last_msg);
    *code = last_code;
}

void tzr_error_restore(const char *msg, int code) {
    snprintf(last_msg, sizeof last_msg, "%s", msg);
    last_code = code;
    cur.cause = TZR_CAUSE_NONE;
    cur.offset = TZR_NO_OFFSET;
    cur.tensor[0] = 0;
}

const char *tzr_printable(const char *bytes, size_t len, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c >= 0x20 && c != 0x7f && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (o + 8 >= cap && len > 0) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = 0;
    return buf;
}

int tzr_version_number(void) { return TZR_VERSION_NUMBER; }

#define TZR_STR2(x) #x
#define TZR_STR(x) TZR_STR2(x)
const char *tzr_version_string(void) {
    return TZR_STR(TZR_VERSION_MAJOR) "." TZR_STR(TZR_VERSION_MINOR) "." TZR_STR(TZR_VERSION_PATCH);
}
