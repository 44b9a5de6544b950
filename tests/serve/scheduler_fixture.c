/* scheduler_fixture.c - the scheduler tests' request recorder and
 * reference run (tests of the serve layer; prefix seen_). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "serve/scheduler_fixture.h"

void seen_init(seen *s)
{
	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
}

void seen_fini(seen *s)
{
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
}

bool seen_on_event(void *user, const strata_scheduler_event *ev)
{
	seen *s = user;
	pthread_mutex_lock(&s->mu);
	if (ev->done) {
		s->done_events++;
		s->finish = ev->finish;
		pthread_cond_broadcast(&s->cv);
	} else if (s->done_events || s->n == SEEN_CAP) {
		s->token_after_done = true;
	} else {
		s->tokens[s->n++] = ev->token;
	}
	bool go = !(s->stop_after && s->n >= s->stop_after);
	strata_scheduler *c = s->cancel_in;
	uint64_t id = s->id;
	uint32_t n = s->n;
	pthread_mutex_unlock(&s->mu);
	if (c && !ev->done && n == 2)
		strata_scheduler_cancel(c, id);
	return go;
}

void seen_wait(seen *s)
{
	pthread_mutex_lock(&s->mu);
	while (s->done_events == 0)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

static strata_status collect(void *user, int32_t token, strata_error *err)
{
	(void)err;
	seen *s = user;
	if (s->n == SEEN_CAP) {
		s->token_after_done = true;
		return STRATA_OK;
	}
	s->tokens[s->n++] = token;
	return STRATA_OK;
}

void seen_generate(const strata_session_options *so,
		   const strata_sampler_params *sp, const int32_t *prompt,
		   uint32_t n, uint32_t max_new, seen *out)
{
	strata_session *ses = NULL;
	strata_sampler *smp = NULL;
	strata_error err;
	if (strata_session_open(so, &ses, &err) ||
	    strata_sampler_create(sp, strata_session_hparams(ses)->vocab,
				  &smp, &err) ||
	    strata_generate(strata_session_forward(ses), smp, prompt, n,
			    max_new, strata_session_hparams(ses)->eos, collect,
			    out, NULL, &err))
		fail_msg("%s / %s", err.message, err.fix);
	strata_sampler_destroy(smp);
	strata_session_close(ses);
}
