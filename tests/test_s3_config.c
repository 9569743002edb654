/* Credential/region/endpoint chain and s3:// addressing, with temporary
 * HOME directories and environment variables (no network). */
#include "check.h"
#include "http_internal.h"
#include "scheme.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *envs[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                             "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
                             "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",
                             "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", NULL};
static int home_n;
static char home[512];

static void fresh_home(void) {
    for (int i = 0; envs[i]; i++) unsetenv(envs[i]);
    snprintf(home, sizeof home, "%s/home%d", check_tmpdir(), ++home_n);
    mkdir(home, 0700);
    char d[600];
    snprintf(d, sizeof d, "%s/.aws", home);
    mkdir(d, 0700);
    setenv("HOME", home, 1);
}

static void put(const char *rel, const char *text) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", home, rel);
    CHECK(check_write_file(p, text, strlen(text)) == 0);
}

static int streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

static void defaults_anonymous_aws(void) {
    fresh_home();
    tzr_s3_config c;
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(c.anonymous == 1);
    CHECK(streq(c.region, "us-east-1"));
    CHECK(c.endpoint == NULL && c.path_style == 0);
    tzr_s3_target t;
    CHECK_OK(tzr_s3_target_make(&t, "s3://my-bucket/dir/model.tensors", &c));
    CHECK(streq(t.host, "my-bucket.s3.us-east-1.amazonaws.com"));
    CHECK(streq(t.url_base, "https://my-bucket.s3.us-east-1.amazonaws.com"));
    CHECK(streq(t.path, "/dir/model.tensors"));
    tzr_s3_target_free(&t);
    /* bucket names with dots cannot be virtual-hosted over TLS */
    CHECK_OK(tzr_s3_target_make(&t, "s3://my.bucket/k", &c));
    CHECK(streq(t.host, "s3.us-east-1.amazonaws.com") && streq(t.path, "/my.bucket/k"));
    tzr_s3_target_free(&t);
    CHECK_RC(tzr_s3_target_make(&t, "s3://bucket-only", &c), TZR_EINVAL);
    CHECK_RC(tzr_s3_target_make(&t, "s3://b/", &c), TZR_EINVAL);
    tzr_s3_config_free(&c);
}

static void options_win(void) {
    fresh_home();
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_REGION", "eu-west-1", 1);
    setenv("AWS_ENDPOINT_URL", "http://10.0.0.1:9000", 1);
    tzr_http_options o = TZR_HTTP_OPTIONS_INIT;
    o.access_key = "OPTKEY";
    o.secret_key = "optsecret";
    o.session_token = "opttoken";
    o.region = "ap-south-1";
    o.endpoint = "http://127.0.0.1:8080/";
    tzr_s3_config c;
    CHECK_OK(tzr_s3_config_resolve(&c, &o));
    CHECK(streq(c.access_key, "OPTKEY") && streq(c.secret_key, "optsecret"));
    CHECK(streq(c.session_token, "opttoken") && streq(c.cred_source, "options"));
    CHECK(streq(c.region, "ap-south-1"));
    CHECK(streq(c.endpoint, "http://127.0.0.1:8080") && c.path_style == 1);
    tzr_s3_target t;
    CHECK_OK(tzr_s3_target_make(&t, "s3://b/k/x", &c));
    CHECK(streq(t.url_base, "http://127.0.0.1:8080") && streq(t.path, "/b/k/x"));
    CHECK(streq(t.host, "127.0.0.1:8080"));
    tzr_s3_target_free(&t);
    tzr_s3_config_free(&c);
    o.anonymous = 1;
    CHECK_OK(tzr_s3_config_resolve(&c, &o));
    CHECK(c.anonymous == 1 && c.access_key == NULL);
    tzr_s3_config_free(&c);
}

static void env_chain(void) {
    fresh_home();
    put(".aws/credentials", "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = f\n");
    setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
    setenv("AWS_SESSION_TOKEN", "envtoken", 1);
    setenv("AWS_DEFAULT_REGION", "us-west-2", 1);
    setenv("AWS_ENDPOINT_URL", "http://other:1", 1);
    setenv("AWS_ENDPOINT_URL_S3", "localhost:9000", 1);
    tzr_s3_config c;
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.access_key, "ENVKEY") && streq(c.session_token, "envtoken"));
    CHECK(streq(c.cred_source, "environment"));
    CHECK(streq(c.region, "us-west-2"));
    CHECK(streq(c.endpoint, "https://localhost:9000") && c.path_style);
    tzr_s3_config_free(&c);
    setenv("AWS_REGION", "eu-north-1", 1); /* AWS_REGION beats AWS_DEFAULT_REGION */
    unsetenv("AWS_ENDPOINT_URL_S3");
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.region, "eu-north-1") && streq(c.endpoint, "http://other:1"));
    tzr_s3_config_free(&c);
}

static void aws_files_profiles(void) {
    fresh_home();
    put(".aws/credentials",
        "# comment\n[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n\n"
        "[dev]\naws_access_key_id = DEVKEY\naws_secret_access_key = devsecret\n"
        "aws_session_token = devtoken\n");
    put(".aws/config",
        "[default]\nregion = us-west-1\n\n[profile dev]\nregion = eu-central-1\ns3 =\n"
        "  endpoint_url = http://127.0.0.1:7480\n  addressing_style = path\n"
        "[profile other]\nendpoint_url = https://minio.local\n"
        "aws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\n");
    tzr_s3_config c;
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.access_key, "DEFKEY") && streq(c.cred_source, "shared credentials file"));
    CHECK(streq(c.region, "us-west-1") && c.endpoint == NULL);
    tzr_s3_config_free(&c);
    setenv("AWS_PROFILE", "dev", 1);
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.access_key, "DEVKEY") && streq(c.session_token, "devtoken"));
    CHECK(streq(c.region, "eu-central-1"));
    CHECK(streq(c.endpoint, "http://127.0.0.1:7480") && c.path_style);
    tzr_s3_config_free(&c);
    setenv("AWS_PROFILE", "other", 1); /* keys only in the config file */
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.access_key, "CFGKEY") && streq(c.cred_source, "config file"));
    CHECK(streq(c.endpoint, "https://minio.local"));
    tzr_s3_config_free(&c);
    /* explicit file locations */
    char p[700];
    snprintf(p, sizeof p, "%s/elsewhere", home);
    const char *alt = "[default]\naws_access_key_id = ALTKEY\naws_secret_access_key = a\n";
    CHECK(check_write_file(p, alt, strlen(alt)) == 0);
    unsetenv("AWS_PROFILE");
    setenv("AWS_SHARED_CREDENTIALS_FILE", p, 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.access_key, "ALTKEY") && streq(c.region, "us-east-1"));
    tzr_s3_config_free(&c);
}

static void s3cfg_tensorizer(void) {
    fresh_home();
    put(".s3cfg", "[default]\naccess_key = S3CFGKEY\nsecret_key = s3cfgsecret\n"
                  "host_base = object.ord1.coreweave.com\nuse_https = True\n");
    tzr_s3_config c;
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.access_key, "S3CFGKEY") && streq(c.cred_source, "~/.s3cfg"));
    CHECK(streq(c.endpoint, "https://object.ord1.coreweave.com") && c.path_style);
    tzr_s3_config_free(&c);
    put(".s3cfg", "[default]\naccess_key = K\nsecret_key = S\nhost_base = 127.0.0.1:8080\n"
                  "use_https = False\n");
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.endpoint, "http://127.0.0.1:8080"));
    tzr_s3_target t;
    CHECK_OK(tzr_s3_target_make(&t, "s3://bkt/a b/\xc3\xa9.tensors", &c));
    CHECK(streq(t.url_base, "http://127.0.0.1:8080") && streq(t.path, "/bkt/a b/\xc3\xa9.tensors"));
    tzr_s3_target_free(&t);
    tzr_s3_config_free(&c);
    /* the AWS chain comes before ~/.s3cfg */
    put(".aws/credentials", "[default]\naws_access_key_id = AWSKEY\naws_secret_access_key = x\n");
    CHECK_OK(tzr_s3_config_resolve(&c, NULL));
    CHECK(streq(c.access_key, "AWSKEY"));
    tzr_s3_config_free(&c);
}

static void signed_request_headers(void) {
    fresh_home();
    tzr_http_options o = TZR_HTTP_OPTIONS_INIT;
    o.access_key = "AK";
    o.secret_key = "VERYSECRET";
    o.session_token = "TOK";
    o.endpoint = "http://127.0.0.1:80";
    tzr_s3_config c;
    tzr_s3_target t;
    CHECK_OK(tzr_s3_config_resolve(&c, &o));
    CHECK_OK(tzr_s3_target_make(&t, "s3://b/dir/a b+c.bin", &c));
    CHECK(streq(t.host, "127.0.0.1")); /* default port dropped */
    struct curl_slist *h = NULL;
    char *url = NULL;
    CHECK_OK(tzr_s3_sign_request(&c, &t, "GET", "partNumber=1&uploadId=x%2By", NULL, &h, &url));
    CHECK(streq(url, "http://127.0.0.1/b/dir/a%20b%2Bc.bin?partNumber=1&uploadId=x%2By"));
    free(url);
    int auth = 0, tok = 0, secret = 0;
    for (struct curl_slist *p = h; p; p = p->next) {
        if (!strncmp(p->data, "Authorization: AWS4-HMAC-SHA256 Credential=AK/", 46)) auth = 1;
        if (!strcmp(p->data, "x-amz-security-token:TOK")) tok = 1;
        if (strstr(p->data, "VERYSECRET")) secret = 1;
    }
    CHECK(auth && tok && !secret);
    curl_slist_free_all(h);
    tzr_s3_target_free(&t);
    tzr_s3_config_free(&c);
}

static void path_dispatch_local(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/local.bin", check_tmpdir());
    tzr_output *o = NULL;
    CHECK_OK(tzr_output_open_path(&o, p, 0, NULL));
    if (o) {
        CHECK_OK(o->pwrite_at(o, "hello", 5, 0));
        CHECK_OK(o->finish(o));
        o->destroy(o);
    }
    tzr_source *s = NULL;
    CHECK_OK(tzr_source_open_path(&s, p, 0, NULL));
    if (s) {
        CHECK(s->size == 5);
        tzr_source_free(s);
    }
    CHECK_RC(tzr_output_open_path(&o, "http://127.0.0.1:1/x", 0, NULL), TZR_ENOTSUP);
    CHECK(tzr_is_url("S3://b/k") && tzr_is_url("https://x") && !tzr_is_url("/tmp/s3://x"));
}

int main(void) {
    RUN(defaults_anonymous_aws);
    RUN(options_win);
    RUN(env_chain);
    RUN(aws_files_profiles);
    RUN(s3cfg_tensorizer);
    RUN(signed_request_headers);
    RUN(path_dispatch_local);
    return check_done();
}
