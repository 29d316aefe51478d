/* Interpolation of partition tables: pure arithmetic on a group in memory (table.h reads and
 * writes the HDF5 file), so it is tested and used without HDF5. */
#include "interp.h"
#include "status.h"
#include "table.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ra_table_ratios_at(const struct ra_table_group *g, int context, double *ratios, int *extrapolated)
{
    const int *cl = g->context_lengths;
    int p = g->p, n = g->n, i = 0, ex = 0;
    if (n < 1)
        return ra_error_set(RA_EINVAL, "table %s/%s/p%d has no entries", g->model_id, g->hw_tag, p);
    if (context < 1)
        return ra_error_set(RA_EINVAL, "table %s/%s/p%d: context %d", g->model_id, g->hw_tag, p, context);
    if (context <= cl[0] || context >= cl[n - 1]) {
        ex = context < cl[0] || context > cl[n - 1];
        memcpy(ratios, g->ratios + (size_t)(context <= cl[0] ? 0 : n - 1) * p, sizeof(double) * (size_t)p);
    } else {
        while (cl[i + 1] <= context) /* cl[0] < context < cl[n-1]: stops at i < n-1 */
            i++;
        double t = (double)(context - cl[i]) / (double)(cl[i + 1] - cl[i]);
        const double *a = g->ratios + (size_t)i * p, *b = a + p;
        for (int r = 0; r < p; r++)
            ratios[r] = (1 - t) * a[r] + t * b[r];
    }
    if (extrapolated)
        *extrapolated = ex;
    return RA_OK;
}

int ra_table_ratios_to_bounds(const double *ratios, int p, int context, int *bounds)
{
    if (p < 1 || context < p)
        return ra_error_set(RA_EINVAL, "the context has %d tokens, fewer than the %d ranks: every rank needs at least one",
                            context, p);
    double acc = 0;
    bounds[0] = 0;
    for (int r = 1; r < p; r++) {
        acc += ratios[r - 1];
        double x = acc * context;
        bounds[r] = !(x > 0) ? 0 : x >= context ? context : (int)lround(x);
    }
    bounds[p] = context;
    /* Rounding can empty a small slice: push boundaries up from the left, then down from the
     * right; with context >= p both passes leave every slice at least one token. */
    for (int r = 1; r < p; r++)
        if (bounds[r] <= bounds[r - 1])
            bounds[r] = bounds[r - 1] + 1;
    for (int r = p - 1; r >= 1; r--)
        if (bounds[r] >= bounds[r + 1])
            bounds[r] = bounds[r + 1] - 1;
    return RA_OK;
}

int ra_table_interpolate(const struct ra_table_group *g, int context, int *bounds, int *extrapolated)
{
    int p = g->p;
    for (int i = 0; i < g->n; i++)
        if (g->context_lengths[i] == context) {
            memcpy(bounds, g->boundaries + (size_t)i * (p + 1), sizeof(int) * (size_t)(p + 1));
            if (extrapolated)
                *extrapolated = 0;
            return RA_OK;
        }
    double *ratios = malloc(sizeof(double) * (size_t)(p > 0 ? p : 1));
    if (!ratios)
        return ra_error_set(RA_ENOMEM, "out of memory");
    int rc = ra_table_ratios_at(g, context, ratios, extrapolated);
    if (rc == RA_OK)
        rc = ra_table_ratios_to_bounds(ratios, p, context, bounds);
    free(ratios);
    return rc;
}
