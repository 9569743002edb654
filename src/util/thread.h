#ifndef TZR_THREAD_H
#define TZR_THREAD_H
#include <pthread.h>
#include "internal.h"
/* pthread_create for the library's own threads: they start with every
 * asynchronous signal blocked, so a process-directed SIGTERM, SIGINT or
 * SIGHUP reaches an application thread (where its handler, or Python's,
 * runs promptly) and never a worker in the middle of a copy. Returns
 * pthread_create's result. */
TZR_HIDDEN int tzr_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);
#endif
