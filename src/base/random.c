/* random.c - a fresh seed for runs that were given none, from the kernel's
 * random source (layer: base). */
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "strata/base.h"

uint64_t strata_random_seed(void)
{
	uint64_t seed;
	if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed)
		return seed;
	/* No entropy yet (early boot): the clock and the process differ
	 * between runs, which is all a default seed needs. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
	       ((uint64_t)getpid() << 32);
	return seed;
}
