/* scheduler_fixture.h - what the scheduler's tests share (tests of the
 * serve layer; prefix seen_): a request's recorder, the tokens and the
 * done event its callback saw, a wait for its end, and the tokens a cold
 * strata_generate gives for a prompt, the reference every scheduled
 * answer is held to. */
#ifndef STRATA_TESTS_SERVE_SCHEDULER_FIXTURE_H
#define STRATA_TESTS_SERVE_SCHEDULER_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "strata/serve.h"

#define SEEN_CAP 512 /* tokens a recorder keeps */

/* What a request's callback saw (seen_on_event), or a reference run's
 * tokens (seen_generate). */
typedef struct seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int32_t tokens[SEEN_CAP];
	uint32_t n;
	int done_events;
	/* a token after the done event, or past SEEN_CAP: checked on the
	 * test's thread (no cmocka assert off it) */
	bool token_after_done;
	strata_scheduler_finish finish;
	uint32_t stop_after; /* stop after this many tokens; 0: never */
	strata_scheduler *cancel_in; /* cancel itself after the 2nd token */
	uint64_t id;		     /* its id, for cancel_in */
} seen;

void seen_init(seen *s);
void seen_fini(seen *s);
/* The scheduler's event callback for a seen (the request's user). */
bool seen_on_event(void *user, const strata_scheduler_event *ev);
/* Until the request's done event has come. */
void seen_wait(seen *s);
/* The tokens strata_generate draws for prompt[0..n) (max_new at most,
 * the model's EOS ending it) on a session of `so` of its own, with sampler
 * `sp`, into out (initialised by the caller); fails the test on error. */
void seen_generate(const strata_session_options *so,
		   const strata_sampler_params *sp, const int32_t *prompt,
		   uint32_t n, uint32_t max_new, seen *out);

#endif
