/* Partitions of a prompt over P ranks: P+1 boundaries 0 = b_0 < ... < b_P = C. */
#ifndef RA_PARTITION_H
#define RA_PARTITION_H

/* Parses a partition spec for a prompt of n_tokens over p ranks into bounds[p+1]:
 *   even                      equal slices (the first ones one token longer)
 *   ratios:0.35,0.25,0.21,0.19  p shares summing to 1 (within 1e-6)
 *   bounds:0,900,1700,2400,3000 p+1 explicit boundaries
 * Every slice must hold at least one token. Errors name the spec and the cause. */
int ra_partition_parse(const char *spec, int n_tokens, int p, int *bounds);

/* Parses the comma-separated finite numbers s (the list of `spec`, named in errors) into v: at
 * most max are stored (max 0: v may be NULL), *n counts them all, so a count error can say how
 * many were given. A bad item is named: "nan" is not a count problem. */
int ra_partition_parse_list(const char *spec, const char *s, double *v, int max, int *n);

/* Writes "0,900,1700,..." into buf. */
void ra_partition_format(const int *bounds, int p, char *buf, int len);

#endif
