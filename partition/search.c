/* The hierarchical grid search over partitions: see search.h. */
#include "search.h"
#include "partition.h"
#include "status.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Values this close (relative) are ties: the cost model's flat stretches are
 * exact, a measured objective never ties, so the rule only has to be stable. */
#define TIE_REL 1e-12

/* ------------------------------------------------------------------ memo */

/* Open-addressing hash set of evaluated partitions (their p-1 inner boundaries). */
struct memo {
    int width;
    size_t cap, n; /* cap is a power of two */
    int *keys;     /* [cap][width] */
    double *vals;
    unsigned char *used;
};

static uint64_t memo_hash(const int *key, int width)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (int i = 0; i < width; i++) {
        h ^= (uint32_t)key[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static int memo_alloc(struct memo *mm, int width, size_t cap)
{
    mm->width = width;
    mm->cap = cap;
    mm->n = 0;
    mm->keys = malloc(sizeof(int) * cap * (size_t)(width > 0 ? width : 1));
    mm->vals = malloc(sizeof(double) * cap);
    mm->used = calloc(cap, 1);
    if (!mm->keys || !mm->vals || !mm->used)
        return ra_error_set(RA_ENOMEM, "search: out of memory for %zu memoised partitions", cap);
    return RA_OK;
}

static void memo_free(struct memo *mm)
{
    free(mm->keys);
    free(mm->vals);
    free(mm->used);
    memset(mm, 0, sizeof *mm);
}

/* The slot holding key, or the empty slot where it belongs. */
static size_t memo_slot(const struct memo *mm, const int *key)
{
    size_t i = (size_t)memo_hash(key, mm->width) & (mm->cap - 1);
    while (mm->used[i] && memcmp(mm->keys + i * (size_t)mm->width, key, sizeof(int) * (size_t)mm->width))
        i = (i + 1) & (mm->cap - 1);
    return i;
}

static int memo_find(const struct memo *mm, const int *key, double *value)
{
    size_t i = memo_slot(mm, key);
    if (!mm->used[i])
        return 0;
    *value = mm->vals[i];
    return 1;
}

static void memo_store(struct memo *mm, const int *key, double value)
{
    size_t i = memo_slot(mm, key);
    if (!mm->used[i])
        mm->n++;
    mm->used[i] = 1;
    memcpy(mm->keys + i * (size_t)mm->width, key, sizeof(int) * (size_t)mm->width);
    mm->vals[i] = value;
}

/* Doubles the table once it is half full, so probe chains stay short. */
static int memo_put(struct memo *mm, const int *key, double value)
{
    if (2 * (mm->n + 1) > mm->cap) {
        struct memo bigger;
        int rc = memo_alloc(&bigger, mm->width, 2 * mm->cap);
        if (rc != RA_OK) {
            memo_free(&bigger);
            return rc;
        }
        for (size_t i = 0; i < mm->cap; i++)
            if (mm->used[i])
                memo_store(&bigger, mm->keys + i * (size_t)mm->width, mm->vals[i]);
        memo_free(mm);
        *mm = bigger;
    }
    memo_store(mm, key, value);
    return RA_OK;
}

/* ------------------------------------------------------------------ search state */

/* How a one-dimensional search moves boundary b_i (see search.h). */
enum move_kind {
    MOVE_ALONE,  /* b_i alone: tokens pass between ranks i-1 and i */
    MOVE_SUFFIX, /* b_i, the later boundaries rescaled to fill [b_i, C) as before */
    MOVE_PREFIX, /* b_i, the earlier boundaries rescaled to fill [0, b_i) as before */
    MOVE_KINDS,
    MOVE_FAMILY = MOVE_KINDS /* every boundary, along the equal-work family set by b_1 */
};

struct search {
    int n_tokens, p, m, min_stride, s0, levels;
    ra_objective_fn f;
    void *ctx;
    const struct ra_search_opts *o; /* NULL: no progress callback */
    struct memo memo;
    int *cur, *probe, *best; /* bounds[p+1]: the search's point, scratch, best seen */
    double cur_value, best_value;
    int have_best;
    double *grid_vals; /* one level's values, NAN where the point is invalid */
    int *digits;       /* [p-1] one grid point's index per axis */
    int *axes;         /* [p-1] */
    enum move_kind kind; /* of one-dimensional searches */
    int trials, planned;
};

static int is_tie(double a, double b)
{
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs(a - b) <= TIE_REL * fabs(b);
}

static int is_better(double a, double b)
{
    return a < b && !is_tie(a, b);
}

static int valid_bounds(const int *b, int n_tokens, int p)
{
    if (b[0] != 0 || b[p] != n_tokens)
        return 0;
    for (int r = 0; r < p; r++)
        if (b[r + 1] <= b[r])
            return 0;
    return 1;
}

static void report_progress(const struct search *s)
{
    if (s->o && s->o->progress)
        s->o->progress(s->o->progress_ctx, s->trials, s->planned > s->trials ? s->planned : s->trials,
                       s->best_value, s->best);
}

/* Evaluates bounds once; later calls with the same bounds read the memo. */
static int evaluate(struct search *s, const int *bounds, double *value)
{
    if (memo_find(&s->memo, bounds + 1, value))
        return RA_OK;
    int rc = s->f(s->ctx, bounds, s->p, value);
    if (rc != RA_OK)
        return rc;
    if (isnan(*value))
        return ra_error_set(RA_ERANGE, "search: the objective returned NaN for a %d-rank partition of %d tokens",
                            s->p, s->n_tokens);
    if ((rc = memo_put(&s->memo, bounds + 1, *value)) != RA_OK)
        return rc;
    s->trials++;
    if (!s->have_best || *value < s->best_value) {
        s->have_best = 1;
        s->best_value = *value;
        memcpy(s->best, bounds, sizeof(int) * (size_t)(s->p + 1));
    }
    report_progress(s);
    return RA_OK;
}

/* ------------------------------------------------------------------ one grid level */

static int grid_points(int m, int n_axes)
{
    long long n = 1;
    for (int a = 0; a < n_axes && n <= RA_SEARCH_GRID_MAX_POINTS; a++)
        n *= m;
    return n > RA_SEARCH_GRID_MAX_POINTS ? RA_SEARCH_GRID_MAX_POINTS + 1 : (int)n;
}

/* Point pt's digits, the last axis fastest (the enumeration order). */
static void decode_point(int pt, int m, int n_axes, int *digits)
{
    for (int a = n_axes - 1; a >= 0; a--) {
        digits[a] = pt % m;
        pt /= m;
    }
}

static int centre_distance(const int *digits, int n_axes, int h)
{
    int d = 0;
    for (int a = 0; a < n_axes; a++)
        d += abs(digits[a] - h);
    return d;
}

static double min_value(const double *v, int n)
{
    double best = INFINITY;
    int any = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i]) && (!any || v[i] < best)) {
            best = v[i];
            any = 1;
        }
    return best;
}

/* Several axes: the tying point nearest the centre, then the first. */
static int choose_nearest(struct search *s, const double *v, int n, int n_axes)
{
    const double vmin = min_value(v, n);
    const int h = (s->m - 1) / 2;
    int pick = -1, pick_dist = 0;
    for (int pt = 0; pt < n; pt++) {
        if (isnan(v[pt]) || !is_tie(v[pt], vmin))
            continue;
        decode_point(pt, s->m, n_axes, s->digits);
        int d = centre_distance(s->digits, n_axes, h);
        if (pick < 0 || d < pick_dist) {
            pick = pt;
            pick_dist = d;
        }
    }
    return pick;
}

/* One axis: the middle of the tying points (of two middles, the one nearer the
 * centre, then the lower), which walks across a flat stretch of a max-type
 * objective instead of sitting at its edge (see search.h). */
static int choose_middle(const struct search *s, const double *v, int n)
{
    const double vmin = min_value(v, n);
    const int h = (s->m - 1) / 2;
    int ties[RA_SEARCH_MAX_POINTS_PER_AXIS], t = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i]) && is_tie(v[i], vmin))
            ties[t++] = i;
    int lo = ties[(t - 1) / 2], hi = ties[t / 2];
    return abs(hi - h) < abs(lo - h) ? hi : lo;
}

/* Maps boundaries first..last of from, lying in [old0, old1], linearly onto
 * [new0, new1], rounding to nearest in integers (the same on every rank). */
static void rescale(int *b, const int *from, int first, int last, int old0, int old1, int new0, int new1)
{
    const long long den = old1 - old0;
    for (int j = first; j <= last; j++) {
        long long num = (long long)(from[j] - old0) * (new1 - new0);
        b[j] = new0 + (int)((2 * num + den) / (2 * den));
    }
}

/* The equal-work family (see search.h): with k = c·C/(2a), boundary i/P of
 * the way through the ranks sits at u·C where u + k·u² = (1 + k)·i/P, written
 * in a form that is exact at k = 0 (even) and stable near k = -1. */
static double family_u(double k, double x)
{
    return 2 * (1 + k) * x / (1 + sqrt(1 + 4 * k * (1 + k) * x));
}

/* The family member whose first boundary is at u1·C, or 0 if there is none. */
static int family_k(double u1, int p, double *k)
{
    const double x = 1.0 / p, den = u1 * u1 - x;
    if (!(u1 > 0) || !(den < 0))
        return 0;
    *k = (x - u1) / den;
    return 1;
}

/* probe = cur moved along the family by moving b_1 by delta: each boundary
 * shifts by the change of its family position, so a seed keeps its detail. */
static int family_probe(struct search *s, int delta)
{
    const int *b = s->cur, p = s->p, C = s->n_tokens;
    double k0, k1;
    memcpy(s->probe, b, sizeof(int) * (size_t)(p + 1));
    if (!family_k((double)b[1] / C, p, &k0) || !family_k((double)(b[1] + delta) / C, p, &k1))
        return 0;
    for (int i = 1; i < p; i++)
        s->probe[i] = b[i] + (int)lround(C * (family_u(k1, (double)i / p) - family_u(k0, (double)i / p)));
    return valid_bounds(s->probe, C, p);
}

/* probe = cur with b_i moved by delta the way s->kind says; 0 if invalid. */
static int move_probe(struct search *s, int i, int delta)
{
    const int *b = s->cur, nb = b[i] + delta, p = s->p;
    memcpy(s->probe, b, sizeof(int) * (size_t)(p + 1));
    if (delta == 0) /* the centre is the current point, whatever the move */
        return 1;
    if (s->kind == MOVE_FAMILY)
        return family_probe(s, delta);
    if (nb <= 0 || nb >= s->n_tokens)
        return 0;
    s->probe[i] = nb;
    if (s->kind == MOVE_SUFFIX)
        rescale(s->probe, b, i + 1, p - 1, b[i], s->n_tokens, nb, s->n_tokens);
    else if (s->kind == MOVE_PREFIX)
        rescale(s->probe, b, 1, i - 1, 0, b[i], 0, nb);
    return valid_bounds(s->probe, s->n_tokens, p);
}

/* Fills probe with the point of the grid around cur, or returns 0 if invalid. */
static int grid_probe(struct search *s, int pt, int n_axes, int stride)
{
    const int h = (s->m - 1) / 2;
    decode_point(pt, s->m, n_axes, s->digits);
    if (n_axes == 1)
        return move_probe(s, s->axes[0], (s->digits[0] - h) * stride);
    memcpy(s->probe, s->cur, sizeof(int) * (size_t)(s->p + 1));
    for (int a = 0; a < n_axes; a++)
        s->probe[s->axes[a]] = s->cur[s->axes[a]] + (s->digits[a] - h) * stride;
    return valid_bounds(s->probe, s->n_tokens, s->p);
}

/* Evaluates every valid point of the grid over the first n_axes of s->axes,
 * spaced stride apart around s->cur, and moves s->cur to the chosen one.
 * *edge says the chosen point is on the grid's edge and beats the centre. */
static int grid_level(struct search *s, int n_axes, int stride, int *edge)
{
    const int n = grid_points(s->m, n_axes), h = (s->m - 1) / 2;
    int rc = RA_OK, centre = 0;
    for (int a = 0; a < n_axes; a++)
        centre = centre * s->m + h;
    for (int pt = 0; pt < n; pt++) {
        s->grid_vals[pt] = NAN;
        if (grid_probe(s, pt, n_axes, stride) && (rc = evaluate(s, s->probe, &s->grid_vals[pt])) != RA_OK)
            return rc;
    }
    int pick = n_axes == 1 ? choose_middle(s, s->grid_vals, n) : choose_nearest(s, s->grid_vals, n, n_axes);
    int on_edge = 0;
    decode_point(pick, s->m, n_axes, s->digits);
    for (int a = 0; a < n_axes; a++)
        on_edge |= s->digits[a] == 0 || s->digits[a] == s->m - 1;
    *edge = on_edge && is_better(s->grid_vals[pick], s->grid_vals[centre]);
    grid_probe(s, pick, n_axes, stride);
    memcpy(s->cur, s->probe, sizeof(int) * (size_t)(s->p + 1));
    s->cur_value = s->grid_vals[pick];
    return RA_OK;
}

static int next_stride(const struct search *s, int stride)
{
    int half = (stride + 1) / 2;
    return half > s->min_stride ? half : s->min_stride;
}

/* The hierarchical search over the first n_axes of s->axes: a level per
 * stride from s0 down to min_stride, each around the previous level's pick. */
static int zoom_search(struct search *s, int n_axes)
{
    int rc = RA_OK, stride = s->s0;
    for (;;) {
        for (int rep = 0; rc == RA_OK; rep++) {
            int edge = 0;
            rc = grid_level(s, n_axes, stride, &edge);
            if (!edge || rep == RA_SEARCH_MAX_RECENTER)
                break;
        }
        if (rc != RA_OK || stride <= s->min_stride)
            return rc;
        stride = next_stride(s, stride);
    }
}

/* ------------------------------------------------------------------ strategies */

static int search_grid(struct search *s)
{
    s->kind = MOVE_ALONE;
    for (int i = 0; i < s->p - 1; i++)
        s->axes[i] = i + 1;
    s->planned = s->levels * grid_points(s->m, s->p - 1);
    return zoom_search(s, s->p - 1);
}

/* Sweeps of one-dimensional searches, one boundary and one move kind at a
 * time, until two sweeps in a row no longer lower the objective: a sweep of
 * sideways moves across flat stretches can make room for the next to improve. */
static int search_coordinate(struct search *s)
{
    const int per_sweep = s->levels * (s->m - 1) * ((s->p - 1) * MOVE_KINDS + 1);
    int rc = RA_OK, idle = 0;
    for (int sweep = 0; sweep < RA_SEARCH_MAX_SWEEPS && idle < 2 && rc == RA_OK; sweep++) {
        const double before = s->cur_value;
        s->planned = s->trials + per_sweep;
        s->axes[0] = 1;
        s->kind = MOVE_FAMILY;
        rc = zoom_search(s, 1);
        for (int i = 1; i < s->p && rc == RA_OK; i++)
            for (int k = 0; k < MOVE_KINDS && rc == RA_OK; k++) {
                s->axes[0] = i;
                s->kind = (enum move_kind)k;
                rc = zoom_search(s, 1);
            }
        idle = is_better(s->cur_value, before) ? 0 : idle + 1;
    }
    return rc;
}

/* ------------------------------------------------------------------ setup */

static int resolve_opts(struct search *s, const struct ra_search_opts *o)
{
    s->m = o && o->points_per_axis ? o->points_per_axis : 5;
    s->min_stride = o && o->min_stride ? o->min_stride : 16;
    double span = o && o->initial_span > 0 ? o->initial_span : 1.0;
    if (s->m < 3 || s->m > RA_SEARCH_MAX_POINTS_PER_AXIS)
        return ra_error_set(RA_EINVAL, "search: %d points per axis (need 3..%d)", s->m, RA_SEARCH_MAX_POINTS_PER_AXIS);
    if (s->min_stride < 1)
        return ra_error_set(RA_EINVAL, "search: minimum stride %d (need >= 1 token)", s->min_stride);
    if (o && (o->initial_span < 0 || !isfinite(o->initial_span)))
        return ra_error_set(RA_EINVAL, "search: initial span %g (need a positive fraction of C/P)", o->initial_span);
    /* The first grid's outer points reach span·C/P from the seed. */
    double s0 = ceil(span * s->n_tokens / s->p / ((s->m - 1) / 2));
    s->s0 = s0 < 1 ? 1 : s0 > s->n_tokens ? s->n_tokens : (int)s0;
    s->levels = 1;
    for (int st = s->s0; st > s->min_stride; st = next_stride(s, st))
        s->levels++;
    return RA_OK;
}

static int start_point(struct search *s, const struct ra_search_opts *o)
{
    if (!o || !o->seed)
        return ra_partition_parse("even", s->n_tokens, s->p, s->cur);
    if (!valid_bounds(o->seed, s->n_tokens, s->p))
        return ra_error_set(RA_EINVAL, "search: the seed is not a partition of %d tokens over %d ranks "
                                       "(0 = b_0 < ... < b_p = %d)", s->n_tokens, s->p, s->n_tokens);
    memcpy(s->cur, o->seed, sizeof(int) * (size_t)(s->p + 1));
    return RA_OK;
}

static int search_init(struct search *s, int n_tokens, int p, const struct ra_search_opts *o)
{
    s->n_tokens = n_tokens;
    s->p = p;
    s->o = o;
    int rc = resolve_opts(s, o);
    if (rc != RA_OK)
        return rc;
    const size_t b = sizeof(int) * (size_t)(p + 1);
    const int axes = p > 1 ? p - 1 : 1;
    s->cur = malloc(b);
    s->probe = malloc(b);
    s->best = malloc(b);
    s->digits = malloc(sizeof(int) * (size_t)axes);
    s->axes = malloc(sizeof(int) * (size_t)axes);
    s->grid_vals = malloc(sizeof(double) * (RA_SEARCH_GRID_MAX_POINTS + RA_SEARCH_MAX_POINTS_PER_AXIS));
    if (!s->cur || !s->probe || !s->best || !s->digits || !s->axes || !s->grid_vals)
        return ra_error_set(RA_ENOMEM, "search: out of memory");
    if ((rc = memo_alloc(&s->memo, p - 1, 1024)) != RA_OK)
        return rc;
    return start_point(s, o);
}

static void search_free(struct search *s)
{
    memo_free(&s->memo);
    free(s->cur);
    free(s->probe);
    free(s->best);
    free(s->digits);
    free(s->axes);
    free(s->grid_vals);
}

static int uses_grid(int p, int m)
{
    return grid_points(m, p - 1) <= RA_SEARCH_GRID_MAX_POINTS;
}

const char *ra_search_method_name(int p, const struct ra_search_opts *o)
{
    int m = o && o->points_per_axis ? o->points_per_axis : 5;
    if (p <= 1)
        return "trivial";
    return uses_grid(p, m) ? "grid" : "coordinate";
}

int ra_search_partition(int n_tokens, int p, ra_objective_fn f, void *ctx, const struct ra_search_opts *o,
                        int *best_bounds, double *best_value, int *n_trials)
{
    struct search s = { 0 };
    int rc;
    if (p < 1 || !f || !best_bounds || !best_value) {
        rc = ra_error_set(RA_EINVAL, "search: %d ranks, or no objective or output", p);
        goto cleanup;
    }
    if (n_tokens < p) {
        rc = ra_error_set(RA_EINVAL, "search: %d tokens cannot give each of %d ranks a slice", n_tokens, p);
        goto cleanup;
    }
    s.f = f;
    s.ctx = ctx;
    if ((rc = search_init(&s, n_tokens, p, o)) != RA_OK)
        goto cleanup;
    s.planned = 1;
    if ((rc = evaluate(&s, s.cur, &s.cur_value)) != RA_OK || p == 1)
        goto cleanup;
    rc = uses_grid(p, s.m) ? search_grid(&s) : search_coordinate(&s);
cleanup:
    if (rc == RA_OK) {
        memcpy(best_bounds, s.cur, sizeof(int) * (size_t)(p + 1));
        *best_value = s.cur_value;
    }
    if (n_trials)
        *n_trials = s.trials;
    search_free(&s);
    return rc;
}

int ra_search_family_bounds(int n_tokens, int p, double k, int *bounds)
{
    if (p < 1 || n_tokens < p || !bounds)
        return ra_error_set(RA_EINVAL, "equal-work split: %d tokens over %d ranks", n_tokens, p);
    if (!(k > -1) || isinf(k))
        return ra_error_set(RA_EINVAL, "equal-work split: family parameter k = %g (need a finite k > -1)", k);
    bounds[0] = 0;
    bounds[p] = n_tokens;
    for (int i = 1; i < p; i++) {
        long b = lround(n_tokens * family_u(k, (double)i / p));
        const long lo = bounds[i - 1] + 1, hi = n_tokens - (p - i); /* room for the slices around it */
        bounds[i] = (int)(b < lo ? lo : b > hi ? hi : b);
    }
    return RA_OK;
}
