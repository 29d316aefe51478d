/* The chunk store's check (ra_store_verify): every chunk the index names,
 * read whole, and the files under chunks/ that the index does not name. */
#include "reuse/store_impl.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "reuse/craft.h"
#include "status.h"

/* One chunk file: its header, identity (against its own name) and every layer. */
static int verify_file(struct ra_store *st, const char *key, const char *path)
{
    struct ra_chunk *c = NULL;
    char hex[2 * RA_STORE_HASH_BYTES + 1];
    int rc = ra_chunk_open(path, &c);
    if (rc != RA_OK || !c) {
        fprintf(stderr, "runahead: %s\n", rc != RA_OK ? ra_error_message() : "missing");
        return 1;
    }
    ra_store_hex(c->layout.h.key, hex);
    int bad = 0;
    if (strcmp(hex, key) != 0) {
        fprintf(stderr, "runahead: %s: the header's key is %.16s..., not the file's name\n", path, hex);
        bad = 1;
    }
    for (int l = 0; l < (int)c->layout.h.n_layers && !bad; l++) {
        const void *k, *v;
        if (ra_chunk_layer(c, l, &k, &v) != RA_OK) {
            fprintf(stderr, "runahead: %s\n", ra_error_message());
            bad = 1;
        }
    }
    ra_chunk_close(c);
    return bad;
}

/* Whether KEY is one of the N entries. */
static int in_index(const struct ra_store_entry *e, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strncmp(e[i].key, key, 2 * RA_STORE_HASH_BYTES) == 0)
            return 1;
    return 0;
}

/* A chunk's craft record (craft.h): its chunk in the index, the record whole. */
static int verify_record(const char *sub, const char *name, const struct ra_store_entry *e, int n)
{
    char *path = ra_store_join(sub, name);
    struct ra_craft_record r;
    uint8_t *data = NULL;
    long size = -1;
    int bad = 0;
    if (!in_index(e, n, name)) {
        fprintf(stderr, "runahead: %s/%s: a craft record of a chunk the index does not name\n", sub, name);
        free(path);
        return 1;
    }
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (data = malloc((size_t)size + 1)) && fread(data, 1, (size_t)size, f) == (size_t)size) {
        if (ra_craft_record_parse(data, (size_t)size, path, &r) == RA_OK)
            ra_craft_record_free(&r);
        else
            fprintf(stderr, "runahead: %s\n", ra_error_message()), bad = 1;
    } else {
        fprintf(stderr, "runahead: %s/%s: cannot read\n", sub, name);
        bad = 1;
    }
    if (f)
        fclose(f);
    free(data);
    free(path);
    return bad;
}

/* Files under DIR/chunks/KK/ that the index does not name: chunks whose
 * index update failed, temporary files of a writer that died. */
static int verify_orphans(struct ra_store *st, const struct ra_store_entry *e, int n, int *bad)
{
    char *chunks = ra_store_join(st->dir, "chunks");
    DIR *top = chunks ? opendir(chunks) : NULL;
    struct dirent *d, *f;
    if (!top) {
        int rc = chunks && errno == ENOENT ? RA_OK : ra_error_set(RA_EIO, "%s/chunks: cannot read: %s", st->dir, strerror(errno));
        free(chunks);
        return rc;
    }
    while ((d = readdir(top))) {
        if (d->d_name[0] == '.')
            continue;
        char *sub = ra_store_join(chunks, d->d_name);
        DIR *dd = sub ? opendir(sub) : NULL;
        while (dd && (f = readdir(dd))) {
            const char *dot = strchr(f->d_name, '.');
            if (f->d_name[0] == '.')
                continue;
            if (dot && dot - f->d_name == 2 * RA_STORE_HASH_BYTES &&
                (strncmp(dot, ".rachunk.", 9) == 0 || strncmp(dot, ".racraft.", 9) == 0)) {
                fprintf(stderr, "runahead: %s/%s: a chunk being written (or by a writer that died)\n", sub,
                        f->d_name);
            } else if (dot && strcmp(dot, ".racraft") == 0 && dot - f->d_name == 2 * RA_STORE_HASH_BYTES) {
                *bad += verify_record(sub, f->d_name, e, n);
            } else if (!dot || strcmp(dot, ".rachunk") != 0 || dot - f->d_name != 2 * RA_STORE_HASH_BYTES) {
                fprintf(stderr, "runahead: %s/%s: not a chunk file\n", sub,
                        f->d_name);
                (*bad)++;
            } else if (!in_index(e, n, f->d_name)) {
                fprintf(stderr, "runahead: %s/%s: a chunk file the index does not name\n", sub, f->d_name);
                (*bad)++;
            }
        }
        if (dd)
            closedir(dd);
        free(sub);
    }
    closedir(top);
    free(chunks);
    return RA_OK;
}

int ra_store_verify(struct ra_store *st, int *bad)
{
    struct ra_store_entry *e = NULL;
    int n = 0;
    *bad = 0;
    int rc = ra_store_list(st, &e, &n);
    if (rc != RA_OK)
        return rc;
    for (int i = 0; i < n; i++) {
        char *path = ra_store_chunk_path(st, e[i].key);
        struct stat sb;
        if (!path) {
            rc = ra_error_set(RA_ENOMEM, "%s: out of memory", st->dir);
            break;
        }
        if (stat(path, &sb) != 0) {
            fprintf(stderr, "runahead: %s: in the index, but %s\n", path, strerror(errno));
            (*bad)++;
        } else if (verify_file(st, e[i].key, path)) {
            (*bad)++;
        } else if ((uint64_t)sb.st_size != e[i].bytes) {
            fprintf(stderr, "runahead: %s: %lld bytes, the index says %llu\n", path, (long long)sb.st_size,
                    (unsigned long long)e[i].bytes);
            (*bad)++;
        }
        free(path);
    }
    if (rc == RA_OK)
        rc = verify_orphans(st, e, n, bad);
    free(e);
    return rc;
}
