/* Searching the partition that minimises an objective (measured TTFT or the
 * cost model): the paper's hierarchical grid search (§4.2, Fig. 6, appendix D).
 *
 * A partition of C tokens over P ranks is P+1 boundaries 0 = b_0 < ... < b_P = C.
 * The search moves the P-1 inner boundaries by offsets δ_i from a seed (even by
 * default):
 *
 *   P = 1      nothing to search: the objective is evaluated once.
 *   P >= 2 while points_per_axis^(P-1) <= RA_SEARCH_GRID_MAX_POINTS (P <= 4 at
 *              the default 5 points): the full hierarchical grid. A level
 *              evaluates every valid point of a grid of points_per_axis offsets
 *              per axis, spaced `stride` apart around the current best; the next
 *              level halves the stride around the new best, down to min_stride.
 *              P = 2 is the same code on one axis: a bracketing search that
 *              finds the minimum of a unimodal function to within min_stride.
 *              When the best point lies on the grid's edge and beats the centre,
 *              the level is repeated around it (at most RA_SEARCH_MAX_RECENTER
 *              times), so an optimum outside the first grid is still reached.
 *   larger P   a fallback, because the grid grows as 5^(P-1) per level: already
 *              at P = 6 it took 14606 trials on the balance test function
 *              (max over ranks of a·n_r + c·n_r·b_r) where the fallback takes
 *              under 300 for a better result, and P = 16 would need 5^15.
 *              The fallback is a coordinate-wise search: sweeps of
 *              one-dimensional searches (the same grid + zoom, ties to the
 *              middle), until two sweeps in a row bring no improvement (at most
 *              RA_SEARCH_MAX_SWEEPS). TTFT is a maximum over ranks, and plain
 *              coordinate moves stall on it: moving one boundary trades tokens
 *              between two ranks, which cannot help once several ranks tie for
 *              the maximum (from an even start on the balance function they
 *              stopped at 1.52x the optimum for P = 16). So a sweep is
 *               1. one search along the equal-work family: the partitions that
 *                  give every rank the same a·n + c·n·b work (linear layers plus
 *                  causal attention), u + k·u² = (1 + k)·i/P for boundary u·C of
 *                  rank i, one shape per k (k = 0 is even); the search moves
 *                  b_1, which fixes k, and every boundary shifts by the change
 *                  of its family position (so a seed keeps its own detail);
 *               2. for each boundary b_1 .. b_{P-1}, three searches: b_i alone;
 *                  b_i with the later boundaries rescaled to keep their
 *                  proportions of [b_i, C) (all later ranks shrink or grow
 *                  together); b_i with the earlier ones rescaled within [0, b_i).
 *              Step 1 lands near the optimum in few, noise-robust trials when the
 *              ranks are alike; step 2 adds what the family cannot express
 *              (unequal ranks, communication, pipeline fill). Where the objective
 *              is flat along a move (the slowest rank is elsewhere), taking the
 *              middle of the tying points gives the neighbours slack for the
 *              next move. On the balance function: within 0.6% of the optimum
 *              for P = 16 (~1200 trials; 0.7% with ±1% noise), 0.8% for P = 64
 *              (~22000 trials, cheap with the cost model), 0.7% for P = 16
 *              ranks of unequal speed. Limit: with a noisy objective, step 2
 *              only makes moves that gain more than the noise, so unequal ranks
 *              measured with ±1% noise stayed 14% off; repeat measurements (the
 *              median) or search the calibrated cost model instead.
 *
 * Grid points with non-increasing boundaries or empty slices are skipped, never
 * passed to the objective. Every evaluated partition is memoised: the same
 * boundaries are never evaluated twice, and n_trials counts real evaluations.
 *
 * Determinism: the search uses no randomness, clock or global state, so the
 * same inputs and the same objective values give the same sequence of calls on
 * every rank (the measured objective is collective). Ties between grid points
 * (values within a relative 1e-12) go to the point nearest the grid's centre,
 * then to the first in enumeration order (last axis fastest); in one dimension
 * to the middle of the tying points. Rescaled boundaries round in integer
 * arithmetic; family positions use only IEEE-exact operations (sqrt, division). */
#ifndef RA_SEARCH_H
#define RA_SEARCH_H

#define RA_SEARCH_GRID_MAX_POINTS 125  /* largest full grid per level (5^3: P <= 4) */
#define RA_SEARCH_MAX_RECENTER 64      /* repeats of a level whose best is on the edge */
#define RA_SEARCH_MAX_SWEEPS 200       /* coordinate-wise fallback */
#define RA_SEARCH_MAX_POINTS_PER_AXIS 33

/* Evaluates one partition; returns RA_OK and *value (lower is better), or an
 * error that aborts the search (the search returns it unchanged). */
typedef int (*ra_objective_fn)(void *ctx, const int *bounds, int p, double *value);

/* Zero-initialised options (or NULL) mean the defaults. */
struct ra_search_opts {
    int points_per_axis; /* grid values per axis per level, >= 3 (default 5) */
    int min_stride;      /* stop zooming at this stride in tokens (default 16) */
    const int *seed;     /* optional starting bounds[p+1] (e.g. interpolated from a table); NULL = even */
    double initial_span; /* first-level half-width as a fraction of C/P (default 1: ±C/P around the seed,
                          * invalid points skipped); a small span around a good seed saves levels */
    void (*progress)(void *ctx, int trials_done, int trials_planned, double best,
                     const int *best_bounds); /* after every evaluation; may be NULL */
    void *progress_ctx;
};

/* Searches bounds[p+1] for n_tokens over p ranks minimising f. Writes the best
 * partition, its value and the number of evaluations (n_trials may be NULL). */
int ra_search_partition(int n_tokens, int p, ra_objective_fn f, void *ctx, const struct ra_search_opts *o,
                        int *best_bounds, double *best_value, int *n_trials);

/* "trivial", "grid" or "coordinate": which strategy ra_search_partition uses
 * for p ranks with these options (for reports and table attributes). */
const char *ra_search_method_name(int p, const struct ra_search_opts *o);

/* A member of the equal-work family as a partition: boundary i at the nearest
 * token to u·C, where u + k·u² = (1 + k)·i/p (k = 0: even). For a per-rank
 * work of a·n + c·(n·b + n²/2) (linear layers plus causal attention of n
 * tokens after a prefix of b), k = c·C/(2a) gives every rank the same work,
 * each within half a token's work per boundary. Boundaries are kept strictly
 * increasing (1-token slices at least), so any k > -1 gives a valid partition. */
int ra_search_family_bounds(int n_tokens, int p, double k, int *bounds);

#endif
