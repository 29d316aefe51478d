/* Transitional: the core's umbrella header is ra_core.h. This forwarder stays only until
 * jobs/bench-prefill-bin.c (being rewritten on another branch) includes ra_core.h; then it goes.
 * Not installed. */
#include "ra_core.h"
