/* Partition tables: the cost model's profiles (/<model-id>/<hw-tag>/profile), written, read
 * and checked. */
#include "config.h"
#include "table_impl.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>

herr_t ra_tb_profile_name_cb(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    struct profile_names *pn = data;
    (void)loc, (void)info;
    if (strlen(name) >= 64) {
        pn->bad = 1;
        return 0;
    }
    if (pn->n < pn->max)
        strcpy(pn->names[pn->n], name);
    pn->n++;
    return 0;
}

/* Every attribute of a profile group is a scalar double; it holds no objects. */
void ra_tb_check_profile(hid_t fid, const char *name, struct problems *pr)
{
    char where[300];
    char(*names)[64] = calloc(RA_TABLE_MAX_PROFILE, 64);
    struct profile_names pn = { names, 0, RA_TABLE_MAX_PROFILE, 0 };
    hsize_t idx = 0;
    double v;
    snprintf(where, sizeof where, "/%s", name);
    hid_t grp = ra_tb_h5_exists(fid, name, H5I_GROUP) == 1 ? H5Gopen2(fid, name, H5P_DEFAULT) : -1;
    if (grp < 0 || !names) {
        ra_tb_problem(pr, "%s: %s", where, names ? "is not a group" : "out of memory");
        goto cleanup;
    }
    if (H5Aiterate2(grp, H5_INDEX_NAME, H5_ITER_INC, &idx, ra_tb_profile_name_cb, &pn) < 0)
        ra_tb_problem(pr, "%s: attributes cannot be listed", where);
    if (pn.bad)
        ra_tb_problem(pr, "%s: an attribute name is longer than 63 characters", where);
    if (pn.n > pn.max)
        ra_tb_problem(pr, "%s: %d attributes, more than %d", where, pn.n, pn.max);
    for (int i = 0; i < pn.n && i < pn.max; i++)
        ra_tb_attr_read_num(grp, where, names[i], H5T_NATIVE_DOUBLE, H5T_FLOAT, &v, pr);
cleanup:
    ra_tb_h5_close(grp);
    free(names);
}

/* ------------------------------------------------------------------ cost-model profiles */

struct profile {
    const char *model_id, *hw_tag;
    const char *const *names;
    const double *values;
    int n;
};

static int write_profile_cb(hid_t fid, const char *tmp, const void *ctx)
{
    const struct profile *pf = ctx;
    hid_t grp = ra_tb_group_create(fid, pf->model_id, pf->hw_tag, "profile");
    int bad = grp < 0;
    for (int i = 0; i < pf->n && !bad; i++)
        bad = ra_tb_attr_write(grp, pf->names[i], H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &pf->values[i]) < 0;
    ra_tb_h5_close(grp);
    return bad ? ra_tb_h5_fail(tmp, "the profile") : RA_OK;
}

static int profile_locked(const char *path, const void *in, void *out)
{
    const struct profile *pf = in;
    (void)out;
    int rc = ra_tb_check_existing(path);
    return rc == RA_OK ? ra_tb_file_rewrite(path, pf->model_id, pf->hw_tag, "profile", write_profile_cb, pf) : rc;
}

int ra_table_profile_write(const char *path, const char *model_id, const char *hw_tag,
                           const char *const *names, const double *values, int n, const struct ra_table_writer *w)
{
    struct profile pf = { model_id, hw_tag, names, values, n };
    ra_tb_h5_quiet();
    int rc = ra_tb_check_name("model id", model_id);
    if (rc == RA_OK)
        rc = ra_tb_check_name("hardware tag", hw_tag);
    if (rc == RA_OK && (n < 0 || n > RA_TABLE_MAX_PROFILE))
        rc = ra_error_set(RA_ERANGE, "%s: %d profile values, want 0..%d", path, n, RA_TABLE_MAX_PROFILE);
    for (int i = 0; rc == RA_OK && i < n; i++) {
        if (!names[i] || !*names[i] || strlen(names[i]) >= 64 || strchr(names[i], '/'))
            rc = ra_error_set(RA_EINVAL, "%s: profile name %d ('%s') must be 1..63 characters without '/'", path, i,
                              names[i] ? names[i] : "");
        for (int j = 0; rc == RA_OK && j < i; j++)
            if (!strcmp(names[i], names[j]))
                rc = ra_error_set(RA_EINVAL, "%s: profile name '%s' given twice", path, names[i]);
    }
    if (rc == RA_OK)
        rc = ra_tb_locked(path, w, profile_locked, &pf, NULL);
    return rc;
}

int ra_table_profile_read(const char *path, const char *model_id, const char *hw_tag,
                          char (*names)[64], double *values, int max, int *n)
{
    hid_t fid = -1, grp = -1;
    char where[300];
    struct problems pr = { .path = path };
    struct profile_names pn = { names, 0, max, 0 };
    hsize_t idx = 0;
    ra_tb_h5_quiet();
    *n = 0;
    int rc = ra_tb_check_name("model id", model_id);
    if (rc == RA_OK)
        rc = ra_tb_check_name("hardware tag", hw_tag);
    if (rc == RA_OK)
        rc = ra_tb_file_open_checked(path, &fid, NULL);
    if (rc == RA_OK)
        rc = ra_tb_group_open(fid, path, model_id, hw_tag, "profile", "cost-model profile", &grp);
    if (rc != RA_OK)
        goto cleanup;
    ra_tb_group_path(where, sizeof where, model_id, hw_tag, "profile");
    if (H5Aiterate2(grp, H5_INDEX_NAME, H5_ITER_INC, &idx, ra_tb_profile_name_cb, &pn) < 0 || pn.bad) {
        rc = ra_error_set(RA_EFORMAT, "%s: %s: attributes cannot be listed or have names over 63 characters", path, where);
        goto cleanup;
    }
    if (pn.n > max) {
        rc = ra_error_set(RA_ERANGE, "%s: %s has %d values, more than the %d asked for", path, where, pn.n, max);
        goto cleanup;
    }
    for (int i = 0; i < pn.n; i++)
        ra_tb_attr_read_num(grp, where, names[i], H5T_NATIVE_DOUBLE, H5T_FLOAT, &values[i], &pr);
    if (pr.n)
        rc = ra_error_set(RA_EFORMAT, "%s", pr.first);
    else
        *n = pn.n;
cleanup:
    ra_tb_h5_close(grp);
    ra_tb_h5_close(fid);
    return rc;
}
