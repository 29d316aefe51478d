#include "mapped_file.h"
#include "prompt.h"
#include "status.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ra_prompt_parse_ids(const char *text, const char *what, int32_t **ids, int *n)
{
    size_t cap = 64, count = 0;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out)
        return ra_error_set(RA_ENOMEM, "out of memory");
    const char *p = text;
    for (;;) {
        while (isspace((unsigned char)*p) || *p == ',')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && !isspace((unsigned char)*end) && *end != ',')) {
            int len = 0;
            while (p[len] && !isspace((unsigned char)p[len]) && p[len] != ',' && len < 20)
                len++;
            free(out);
            return ra_error_set(RA_EINVAL, "%s: '%.*s' (token %zu) is not a token id", what, len, p, count + 1);
        }
        if (count == cap) {
            int32_t *grown = realloc(out, 2 * cap * sizeof *out);
            if (!grown) {
                free(out);
                return ra_error_set(RA_ENOMEM, "out of memory");
            }
            out = grown;
            cap *= 2;
        }
        out[count++] = (int32_t)v;
        p = end;
    }
    if (count == 0 || count > INT_MAX) {
        free(out);
        return ra_error_set(RA_EINVAL, "%s: no token ids", what);
    }
    *ids = out;
    *n = (int)count;
    return RA_OK;
}

int ra_read_file(const char *path, char **data, size_t *size)
{
    FILE *f = NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int fd, rc = ra_file_open_regular(path, &fd, NULL);
    if (rc != RA_OK)
        return rc;
    if (!(f = fdopen(fd, "rb"))) {
        close(fd);
        return ra_error_set(RA_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    for (;;) {
        if (cap - len < 4096) {
            cap = cap ? 2 * cap : 65536;
            char *grown = realloc(buf, cap + 1);
            if (!grown) {
                rc = ra_error_set(RA_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        rc = ra_error_set(RA_EIO, "%s: read error", path);
        goto out;
    }
    buf[len] = '\0';
    *data = buf;
    buf = NULL;
    if (size)
        *size = len;
out:
    free(buf);
    fclose(f);
    return rc;
}
