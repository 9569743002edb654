/* Pure HTTP helpers (no server): these run everywhere, while
 * tests/test_s3_http.c, which needs its python3 fault server, may SKIP.
 * Put new parser and policy tests of the HTTP code here. */
#include "check.h"
#include "http_internal.h"

#include <string.h>

/* Retry-After: delta-seconds and the three HTTP-date forms; only 429 and
 * 503 honour it. */
static void retry_after_parse(void) {
    CHECK(tzr_http_retry_after_parse("0") == 0);
    CHECK(tzr_http_retry_after_parse("120") == 120);
    CHECK(tzr_http_retry_after_parse("99999999999999999999999") == 1e9);
    CHECK(tzr_http_retry_after_parse("1.5") == -1);
    CHECK(tzr_http_retry_after_parse("soon") == -1);
    CHECK(tzr_http_retry_after_parse("") == -1);
    CHECK(tzr_http_retry_after_parse("Fri, 31 Dec 1999 23:59:59 GMT") == 0); /* past: now */
    double d = tzr_http_retry_after_parse("Fri, 31 Dec 2100 23:59:59 GMT");
    CHECK(d > 1e9);
    /* the obsolete forms (RFC 850, asctime), and not the process locale */
    CHECK(tzr_http_retry_after_parse("Friday, 31-Dec-99 23:59:59 GMT") == 0);
    CHECK(tzr_http_retry_after_parse("Fri Dec 31 23:59:59 1999") == 0);
    d = tzr_http_retry_after_parse("Sun Nov  6 08:49:37 2101");
    CHECK(d > 1e9);
    int asked;
    CHECK(tzr_http_retry_delay_s(1, 429, 30, &asked) == 30 && asked);
    CHECK(tzr_http_retry_delay_s(1, 503, 30, &asked) == 30 && asked);
    CHECK(tzr_http_retry_delay_s(1, 500, 30, &asked) < 1 && !asked); /* only 429/503 */
    CHECK(tzr_http_retry_delay_s(1, 429, -1, &asked) < 1 && !asked);
    CHECK(tzr_http_retry_delay_s(1, 429, 0, &asked) > 0 && !asked);
}

int main(void) {
    RUN(retry_after_parse);
    return check_done();
}
