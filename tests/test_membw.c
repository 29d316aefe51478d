/* src/membw.h: the read and the triad on small arrays, on 1-3 threads, with
 * sizes that leave a tail after the read's blocks of 16 doubles. The read
 * checks its own sum (n ones add up to n): a lost tail, a block read twice or
 * a thread's share dropped makes it fail with RA_EBACKEND. Bad arguments give
 * RA_EINVAL. Rates are only checked to be positive and ordered (best >=
 * median): timing means nothing here. */
#include "membw.h"
#include "status.h"
#include "test.h"

static void check_figures(const struct ra_membw *bw, size_t bytes, int threads, int reps)
{
    CHECK(bw->best_gbs > 0);
    CHECK(bw->median_gbs > 0);
    CHECK(bw->best_gbs >= bw->median_gbs);
    CHECK(bw->array_bytes == bytes);
    CHECK(bw->threads == threads);
    CHECK(bw->reps == reps);
}

int main(void)
{
    const size_t sizes[] = { 8 * 7, 8 * 16, 8 * (16 * 1000 + 7), (size_t)1 << 20 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int th = 1; th <= 3; th++) {
            struct ra_membw bw;
            CHECK_OK(ra_membw_read(sizes[i], th, 3, &bw));
            check_figures(&bw, sizes[i], th, 3);
            CHECK_OK(ra_membw_triad(sizes[i], th, 2, &bw));
            check_figures(&bw, sizes[i], th, 2);
        }
    struct ra_membw bw;
    CHECK(ra_membw_read(4096, 0, 3, &bw) == RA_EINVAL);
    CHECK(ra_membw_read(4096, 1, 0, &bw) == RA_EINVAL);
    CHECK(ra_membw_read(4096, 1, 1000, &bw) == RA_EINVAL);
    CHECK(ra_membw_triad(4096, 0, 3, &bw) == RA_EINVAL);
    CHECK(ra_membw_read(4, 1, 3, &bw) == RA_EINVAL); /* not one double */
    CHECK(ra_membw_triad(4, 1, 3, &bw) == RA_EINVAL);
    return test_result("test_membw");
}
