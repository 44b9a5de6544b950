/* http_api.c - OpenAI's completions and chat completions over the
 * scheduler: the request's fields checked one by one (unknown ones
 * ignored, as OpenAI does), the prompt encoded (a chat's rendered through
 * the chat template first), the tokens turned into text as they come, cut
 * at stop strings, and answered whole or as server-sent events (layer:
 * serve).
 *
 * Trust: the body is hostile. Every field's type and range is checked
 * before use; what fails is a 400 naming the field (`param`).
 */
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve/http_internal.h"

/* A request's fields, checked (http_internal.h). */
typedef strata__http_params gen_params;

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

void strata__http_error(strata__http_reply *r, unsigned status,
			const char *type, const char *code, const char *param,
			const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	r->status = status;
	/* the message may quote the body (a JSON error's text, a name) in
	 * bytes that are not UTF-8, or be cut inside a character: those go
	 * out escaped, so the answer is still the error and not a 503
	 * (fuzz_http_body: crash-invalid-utf8-in-json-error) */
	json_t *m = json_string(msg);
	if (!m) {
		char esc[sizeof msg];
		m = json_string(strata_escape(esc, sizeof esc, msg, strlen(msg)));
	}
	r->body = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", m,
			    "type", type, "param",
			    param ? json_string(param) : json_null(), "code",
			    code ? json_string(code) : json_null());
}

static bool bad(strata__http_reply *r, const char *param, const char *fmt,
		...) __attribute__((format(printf, 3, 4)));
static bool bad(strata__http_reply *r, const char *param, const char *fmt,
		...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	strata__http_error(r, 400, "invalid_request_error", NULL, param, "%s",
			   msg);
	return false;
}

/* ------------------------------------------------------------------------ */
/* Fields                                                                   */
/* ------------------------------------------------------------------------ */

/* A number field in [lo, hi] (absent or null: unchanged). */
static bool number_field(json_t *req, const char *name, double lo, double hi,
			 float *out, strata__http_reply *r)
{
	json_t *v = json_object_get(req, name);
	if (!v || json_is_null(v))
		return true;
	if (!json_is_number(v))
		return bad(r, name, "'%s' must be a number", name);
	double d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi)
		return bad(r, name, "'%s' is %g; it must be between %g and %g",
			   name, d, lo, hi);
	*out = (float)d;
	return true;
}

/* An integer field in [lo, hi]. */
static bool int_field(json_t *req, const char *name, json_int_t lo,
		      json_int_t hi, json_int_t *out, bool *given,
		      strata__http_reply *r)
{
	json_t *iv = json_object_get(req, name);
	if (!iv || json_is_null(iv))
		return true;
	json_int_t x;
	if (json_is_integer(iv))
		x = json_integer_value(iv);
	else if (json_is_real(iv) &&
		 floor(json_real_value(iv)) == json_real_value(iv) &&
		 fabs(json_real_value(iv)) < 9e15)
		x = (json_int_t)json_real_value(iv);
	else
		return bad(r, name, "'%s' must be an integer", name);
	if (x < lo || x > hi)
		return bad(r, name,
			   "'%s' is %lld; it must be between %lld and %lld",
			   name, (long long)x, (long long)lo, (long long)hi);
	*out = x;
	if (given)
		*given = true;
	return true;
}

static bool stop_field(json_t *req, gen_params *g, strata__http_reply *r)
{
	json_t *v = json_object_get(req, "stop");
	if (!v || json_is_null(v))
		return true;
	json_t *one = json_is_string(v) ? v : NULL;
	if (!one && !json_is_array(v))
		return bad(r, "stop", "'stop' must be a string or an array of "
				      "strings");
	size_t n = one ? 1 : json_array_size(v);
	if (n > STRATA__HTTP_MAX_STOPS)
		return bad(r, "stop", "'stop' has %zu strings; at most %u",
			   n, STRATA__HTTP_MAX_STOPS);
	for (size_t i = 0; i < n; i++) {
		json_t *s = one ? one : json_array_get(v, i);
		if (!json_is_string(s))
			return bad(r, "stop", "'stop' item %zu is not a "
					      "string", i);
		g->stop_lens[g->n_stops] = json_string_length(s);
		g->stops[g->n_stops++] = json_string_value(s);
	}
	/* the matcher's own checks (empty, too long): a trial build */
	strata_stop_matcher *m = NULL;
	strata_error err;
	strata_status st = strata_stop_matcher_create(g->stops, g->stop_lens,
						      g->n_stops, &m, &err);
	strata_stop_matcher_destroy(m);
	if (st == STRATA_E_INVALID_ARG)
		return bad(r, "stop", "'stop': %s", err.message);
	return true;
}

/* model, n, stream, stream_options, sampling fields and stop. */
static bool common_fields(json_t *req, gen_params *g, strata__http_reply *r)
{
	json_t *v = json_object_get(req, "model");
	if (v && !json_is_null(v) && !json_is_string(v))
		return bad(r, "model", "'model' must be a string");
	json_int_t n = 1, k = 0, seed = 0, mt = 0;
	bool seed_given = false;
	if (!int_field(req, "n", 1, 1000000, &n, NULL, r))
		return false;
	if (n != 1)
		return bad(r, "n", "'n' is %lld; this server answers one "
				   "choice per request (n = 1)",
			   (long long)n);
	v = json_object_get(req, "stream");
	if (v && !json_is_null(v) && !json_is_boolean(v))
		return bad(r, "stream", "'stream' must be true or false");
	g->stream = v && json_is_true(v);
	v = json_object_get(req, "stream_options");
	if (v && !json_is_null(v)) {
		json_t *u = json_is_object(v) ? json_object_get(v,
							 "include_usage")
					      : NULL;
		if (!json_is_object(v) || (u && !json_is_boolean(u)))
			return bad(r, "stream_options",
				   "'stream_options' must be an object "
				   "with a boolean include_usage");
		g->include_usage = u && json_is_true(u);
	}
	strata_sampler_params_default(&g->sp);
	if (!number_field(req, "temperature", 0, 2, &g->sp.temperature, r) ||
	    !number_field(req, "top_p", 0, 1, &g->sp.top_p, r) ||
	    !number_field(req, "min_p", 0, 1, &g->sp.min_p, r) ||
	    !int_field(req, "top_k", 0, 1 << 30, &k, NULL, r) ||
	    !int_field(req, "seed", INT64_MIN, INT64_MAX, &seed, &seed_given,
		       r))
		return false;
	if (g->sp.top_p == 0.0f)
		return bad(r, "top_p", "'top_p' must be above 0");
	if (json_object_get(req, "top_k"))
		g->sp.top_k = (uint32_t)k;
	g->sp.seed = seed_given ? (uint64_t)seed : strata_random_seed();
	v = json_object_get(req, "max_completion_tokens");
	const char *mt_name = v && !json_is_null(v) ? "max_completion_tokens"
						    : "max_tokens";
	if (!int_field(req, mt_name, 1, 1 << 30, &mt, &g->max_given, r))
		return false;
	g->max_tokens = (uint32_t)mt;
	v = json_object_get(req, "prompt_cache_key");
	if (v && !json_is_null(v) && !json_is_string(v))
		return bad(r, "prompt_cache_key",
			   "'prompt_cache_key' must be a string");
	if (v && json_is_string(v) && json_string_length(v)) {
		g->key = json_string_value(v);
		g->key_len = json_string_length(v);
	}
	return stop_field(req, g, r);
}

/* ------------------------------------------------------------------------ */
/* Prompts                                                                  */
/* ------------------------------------------------------------------------ */

static bool encode(const char *text, size_t len, bool add_special,
		   gen_params *g, const char *param, strata__http_reply *r)
{
	strata_error err;
	strata_status st = strata_tokenizer_encode(g->tok, text, len,
						   add_special, &g->ids,
						   &g->n_ids, &err);
	if (st == STRATA_E_NOMEM) {
		strata__http_error(r, 503, "server_error", "out_of_memory",
				   NULL, "the server is out of memory");
		return false;
	}
	if (st)
		return bad(r, param, "the %s cannot be encoded: %s", param,
			   err.message);
	if (g->n_ids == 0)
		return bad(r, param, "the %s encodes to no tokens", param);
	return true;
}

/* A list of token ids as a prompt. */
static bool id_prompt(json_t *a, gen_params *g, strata__http_reply *r)
{
	size_t n = json_array_size(a);
	if (n == 0 || n > (1u << 24))
		return bad(r, "prompt", "a token prompt needs 1 to 16777216 "
					"ids");
	g->ids = strata_alloc(n * sizeof *g->ids);
	if (!g->ids) {
		strata__http_error(r, 503, "server_error", "out_of_memory",
				   NULL, "the server is out of memory");
		return false;
	}
	uint32_t vocab = strata_tokenizer_vocab_count(g->tok);
	for (size_t i = 0; i < n; i++) {
		json_t *t = json_array_get(a, i);
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) >= vocab)
			return bad(r, "prompt", "prompt item %zu is not a "
						"token id below the "
						"vocabulary's %u", i, vocab);
		g->ids[i] = (int32_t)json_integer_value(t);
	}
	g->n_ids = n;
	return true;
}

/* prompt: a string, [string], a list of ids or [[ids]]. */
static bool completion_prompt(json_t *req, gen_params *g,
			      strata__http_reply *r)
{
	json_t *p = json_object_get(req, "prompt");
	if (!p)
		return bad(r, "prompt", "'prompt' is required");
	if (json_is_array(p) && json_array_size(p) == 1 &&
	    (json_is_string(json_array_get(p, 0)) ||
	     json_is_array(json_array_get(p, 0))))
		p = json_array_get(p, 0);
	if (json_is_string(p))
		return encode(json_string_value(p), json_string_length(p), true,
			      g, "prompt", r);
	if (json_is_array(p) && json_array_size(p) > 0 &&
	    json_is_string(json_array_get(p, 0)))
		return bad(r, "prompt", "'prompt' holds %zu strings; this "
					"server answers one prompt a request",
			   json_array_size(p));
	if (json_is_array(p))
		return id_prompt(p, g, r);
	return bad(r, "prompt", "'prompt' must be a string or a list of "
				"token ids");
}

/* messages: checked and rendered through the model's chat format with a
 * generation prompt, then encoded as the template wrote it (no second
 * BOS): strata_chat_format_encode. */
static bool chat_prompt(json_t *req, gen_params *g, strata__http_reply *r)
{
	json_t *ms = json_object_get(req, "messages");
	if (!json_is_array(ms) || json_array_size(ms) == 0)
		return bad(r, "messages", "'messages' must be a non-empty "
					  "array of messages");
	if (!g->chat_format)
		return bad(r, "messages", "this model has no chat template: "
					  "start strata serve with "
					  "--chat-template FILE, or use "
					  "/v1/completions");
	strata_error err;
	strata_status st = strata_chat_format_encode(
		g->chat_format, g->tok, ms, true, &g->ids, &g->n_ids, &err);
	if (st == STRATA_E_NOMEM) {
		strata__http_error(r, 503, "server_error", "out_of_memory",
				   NULL, "the server is out of memory");
		return false;
	}
	if (st == STRATA_E_INVALID_ARG)
		return bad(r, "messages", "%s (%s)", err.message, err.fix);
	if (st)
		return bad(r, "messages", "the chat template refused the "
					  "messages: %s", err.message);
	const char *eos = strata_chat_format_eos(g->chat_format);
	if (eos && eos[0])
		g->stop_token = strata_tokenizer_find(g->tok, eos, strlen(eos));
	return true;
}

/* ------------------------------------------------------------------------ */
/* Jobs: tokens to text, stop strings, deltas                               */
/* ------------------------------------------------------------------------ */

static bool grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return true;
	size_t c = *cap ? *cap : 256;
	while (c < need)
		c *= 2;
	char *n = strata_realloc(*buf, c);
	if (!n)
		return false;
	*buf = n;
	*cap = c;
	return true;
}

/* One `data: JSON\n\n` event onto the job's output; j->mu is held. */
static void sse_locked(strata__http_job *j, json_t *obj)
{
	char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
	json_decref(obj);
	size_t len = s ? strlen(s) : 0;
	if (!s || !grow(&j->out, &j->out_cap, j->out_len + len + 9)) {
		j->failed_alloc = true;
		free(s);
		return;
	}
	memcpy(j->out + j->out_len, "data: ", 6);
	memcpy(j->out + j->out_len + 6, s, len);
	memcpy(j->out + j->out_len + 6 + len, "\n\n", 2);
	j->out_len += len + 8;
	free(s);
	pthread_cond_broadcast(&j->cv);
}

/* A streamed chunk: a delta of text (or the role), or the finish. */
static json_t *chunk(const strata__http_job *j, const char *text, size_t len,
		     bool role, const char *finish)
{
	json_t *choice = json_pack("{s:i, s:o}", "index", 0, "finish_reason",
				   finish ? json_string(finish) : json_null());
	if (j->chat) {
		json_t *delta = json_object();
		if (role)
			json_object_set_new(delta, "role",
					    json_string("assistant"));
		if (text)
			json_object_set_new(delta, "content",
					    json_stringn(text, len));
		json_object_set_new(choice, "delta", delta);
	} else {
		json_object_set_new(choice, "text",
				    json_stringn(text ? text : "", len));
		json_object_set_new(choice, "logprobs", json_null());
	}
	return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->name,
			 "object",
			 j->chat ? "chat.completion.chunk" : "text_completion",
			 "created", (json_int_t)j->created, "model",
			 j->srv->model_name, "choices", choice);
}

/* Appends a token's text through the stop matcher (final: the text
 * ended, what it held comes out), keeps what it settles and sends that
 * as a delta. False when a stop string matched: the text ends before it.
 * j->mu is held. */
static bool add_text_locked(strata__http_job *j, const char *t, size_t len,
			    bool final)
{
	const char *out = NULL;
	size_t n = 0;
	int matched = -1;
	strata_error err;
	strata_status st =
		final ? strata_stop_matcher_finish(j->stop, &out, &n, &err)
		      : strata_stop_matcher_push(j->stop, t, len, &out, &n,
						 &matched, &err);
	if (st || !grow(&j->text, &j->text_cap, j->text_len + n + 1)) {
		j->failed_alloc = true;
		return false;
	}
	memcpy(j->text + j->text_len, out, n);
	j->text_len += n;
	if (j->stream && n)
		sse_locked(j, chunk(j, out, n, false, NULL));
	if (matched >= 0)
		j->stopped = true;
	return matched < 0;
}

static const char *finish_reason(const strata__http_job *j)
{
	if (j->stopped || j->finish == STRATA_SCHEDULER_FINISH_EOS ||
	    j->finish == STRATA_SCHEDULER_FINISH_STOPPED)
		return "stop";
	return "length";
}

static json_t *usage(const strata__http_job *j)
{
	return json_pack("{s:i, s:i, s:i}", "prompt_tokens",
			 (int)j->prompt_tokens, "completion_tokens",
			 (int)j->completion_tokens, "total_tokens",
			 (int)(j->prompt_tokens + j->completion_tokens));
}

/* The done event: the text held back goes out, then the finish chunk and
 * [DONE] (or an error event when the request could not finish). */
static void job_done_locked(strata__http_job *j,
			    const strata_scheduler_event *ev)
{
	j->finish = ev->finish;
	j->prompt_tokens = ev->prompt_tokens;
	j->completion_tokens = ev->generated_tokens;
	if (ev->finish == STRATA_SCHEDULER_FINISH_FAILED && ev->err)
		snprintf(j->fail_message, sizeof j->fail_message, "%s",
			 ev->err->message);
	const char *t = NULL;
	size_t len = 0;
	strata_error err;
	if (!j->stopped && j->ts &&
	    strata_text_stream_finish(j->ts, &t, &len, &err) == STRATA_OK &&
	    len)
		add_text_locked(j, t, len, false);
	if (!j->stopped)
		add_text_locked(j, "", 0, true);
	if (j->stream) {
		bool cut = ev->finish == STRATA_SCHEDULER_FINISH_CANCELLED ||
			   ev->finish == STRATA_SCHEDULER_FINISH_FAILED;
		if (cut && !j->stopped) {
			strata__http_reply r;
			strata__http_error(
				&r, 503, "server_error", "cancelled", NULL,
				"the request ended before it finished: %s",
				ev->finish == STRATA_SCHEDULER_FINISH_FAILED
					? j->fail_message
					: "the server is shutting down");
			sse_locked(j, r.body);
		} else {
			json_t *c = chunk(j, NULL, 0, false, finish_reason(j));
			if (j->include_usage)
				json_object_set_new(c, "usage", usage(j));
			sse_locked(j, c);
		}
		if (grow(&j->out, &j->out_cap, j->out_len + 14)) {
			memcpy(j->out + j->out_len, "data: [DONE]\n\n", 14);
			j->out_len += 14;
		}
	}
	j->done = true;
	pthread_cond_broadcast(&j->cv);
}

static bool on_event(void *user, const strata_scheduler_event *ev)
{
	strata__http_job *j = user;
	pthread_mutex_lock(&j->mu);
	bool go = true;
	if (ev->done) {
		job_done_locked(j, ev);
	} else {
		const char *t = NULL;
		size_t len = 0;
		strata_error err;
		if (strata_text_stream_push(j->ts, ev->token, &t, &len, &err))
			len = 0;
		go = add_text_locked(j, t ? t : "", len, false);
		j->completion_tokens = ev->generated_tokens;
	}
	pthread_mutex_unlock(&j->mu);
	if (ev->done)
		strata__http_job_unref(j);
	return go;
}

void strata__http_job_cancel(strata__http_job *j)
{
	strata_router_cancel(j->srv->router, j->replica, j->id);
}

void strata__http_job_unref(strata__http_job *j)
{
	if (!j)
		return;
	pthread_mutex_lock(&j->mu);
	int left = --j->refs;
	pthread_mutex_unlock(&j->mu);
	if (left)
		return;
	strata_text_stream_destroy(j->ts);
	strata_stop_matcher_destroy(j->stop);
	strata_free(j->text);
	strata_free(j->out);
	pthread_cond_destroy(&j->cv);
	pthread_mutex_destroy(&j->mu);
	strata_free(j);
}

bool strata__http_client_gone(int fd)
{
	if (fd < 0)
		return false;
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	if (poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
		return true;
	char c;
	return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ------------------------------------------------------------------------ */
/* The request                                                              */
/* ------------------------------------------------------------------------ */

static strata__http_job *job_create(struct strata_server *srv, bool chat,
				    const gen_params *g, int fd)
{
	strata__http_job *j = strata_alloc(sizeof *j);
	if (!j)
		return NULL;
	memset(j, 0, sizeof *j);
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	j->refs = 1;
	j->srv = srv;
	j->chat = chat;
	j->stream = g->stream;
	j->include_usage = g->include_usage;
	j->fd = fd;
	j->created = (int64_t)time(NULL);
	snprintf(j->name, sizeof j->name, "%s-%llu",
		 chat ? "chatcmpl" : "cmpl",
		 (unsigned long long)atomic_fetch_add(&srv->next_job, 1));
	strata_error err;
	if (strata_stop_matcher_create(g->stops, g->stop_lens, g->n_stops,
				       &j->stop, &err) ||
	    strata_text_stream_create(srv->o.tokenizer, g->ids, g->n_ids, true,
				      &j->ts, &err)) {
		strata__http_job_unref(j);
		return NULL;
	}
	return j;
}

/* The whole answer of a finished, non-streaming job. */
static void whole_answer(strata__http_job *j, strata__http_reply *r)
{
	if (j->finish == STRATA_SCHEDULER_FINISH_CANCELLED && !j->stopped) {
		strata__http_error(r, 503, "server_error", "cancelled", NULL,
				   "the request was cancelled: the server is "
				   "shutting down");
		return;
	}
	if (j->finish == STRATA_SCHEDULER_FINISH_FAILED) {
		strata__http_error(r, 500, "server_error", "generation_failed",
				   NULL, "generation failed: %s",
				   j->fail_message);
		return;
	}
	json_t *text = json_stringn(j->text ? j->text : "", j->text_len);
	json_t *choice = j->chat
		? json_pack("{s:i, s:{s:s, s:o}, s:n, s:s}", "index", 0,
			    "message", "role", "assistant", "content", text,
			    "logprobs", "finish_reason", finish_reason(j))
		: json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "text", text,
			    "logprobs", "finish_reason", finish_reason(j));
	r->status = 200;
	r->body = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", j->name,
			    "object",
			    j->chat ? "chat.completion" : "text_completion",
			    "created", (json_int_t)j->created, "model",
			    j->srv->model_name, "choices", choice, "usage",
			    usage(j));
}

/* Waits for a non-streaming job, cancelling it if the client leaves. */
static void wait_job(strata__http_job *j)
{
	pthread_mutex_lock(&j->mu);
	bool cancelled = false;
	while (!j->done) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&j->cv, &j->mu, &ts);
		if (!j->done && !cancelled && strata__http_client_gone(j->fd)) {
			cancelled = true;
			atomic_fetch_add(&j->srv->counts.client_gone, 1);
			strata__http_job_cancel(j);
		}
	}
	pthread_mutex_unlock(&j->mu);
}

/* Parsed fields to a submitted job, or an error reply. */
static strata__http_job *start(struct strata_server *srv, bool chat,
			       gen_params *g, int fd, strata__http_reply *r)
{
	uint32_t context = strata_router_context(srv->router);
	if (g->n_ids >= context) {
		bad(r, chat ? "messages" : "prompt",
		    "the prompt has %zu tokens; the context holds %u, and at "
		    "least one must be left to generate",
		    g->n_ids, context);
		return NULL;
	}
	if (!g->max_given) {
		uint32_t room = context - (uint32_t)g->n_ids;
		g->max_tokens = srv->o.default_max_tokens;
		if (g->max_tokens > room)
			g->max_tokens = room;
	}
	strata__http_job *j = job_create(srv, chat, g, fd);
	if (!j) {
		strata__http_error(r, 503, "server_error", "out_of_memory",
				   NULL, "the server is out of memory");
		return NULL;
	}
	j->refs = 2; /* the connection's and the scheduler's */
	if (j->stream && chat) /* the role first, before any token */
		sse_locked(j, chunk(j, "", 0, true, NULL));
	strata_scheduler_request q = {
		.prompt = g->ids, .n_prompt = (uint32_t)g->n_ids,
		.max_tokens = g->max_tokens, .sampler = g->sp,
		.has_stop_token = g->stop_token >= 0,
		.stop_token = g->stop_token, .on_event = on_event, .user = j,
	};
	/* the routing key: prompt_cache_key, else the prompt's start */
	const void *key = g->key;
	size_t key_bytes = g->key_len;
	if (!key) {
		key = g->ids;
		key_bytes = (g->n_ids < STRATA__HTTP_ROUTE_TOKENS
				     ? g->n_ids
				     : STRATA__HTTP_ROUTE_TOKENS) *
			    sizeof *g->ids;
	}
	strata_error err;
	strata_status st = strata_router_submit(srv->router, key, key_bytes,
						&q, &j->replica, &j->id, &err);
	if (st == STRATA_OK)
		return j;
	j->refs = 1;
	strata__http_job_unref(j);
	if (st == STRATA_E_BUSY)
		atomic_fetch_add(&srv->counts.refused, 1);
	if (st == STRATA_E_BUSY)
		strata__http_error(r, 503, "server_error",
				   atomic_load(&srv->draining) ? "shutting_down"
							       : "queue_full",
				   NULL, "%s (%s)", err.message, err.fix);
	else if (st == STRATA_E_NOMEM)
		strata__http_error(r, 503, "server_error", "out_of_memory",
				   NULL, "the server is out of memory");
	else
		bad(r, st == STRATA_E_INFER_CONTEXT ? "max_tokens" : NULL,
		    "%s (%s)", err.message, err.fix);
	return NULL;
}

bool strata__http_parse_body(bool chat, const char *body, size_t body_len,
			     strata__http_params *g, json_t **req,
			     strata__http_reply *r)
{
	json_error_t je;
	*req = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &je);
	if (!*req)
		return bad(r, NULL, "the body is not valid JSON: %s (line %d, "
				    "column %d)", je.text, je.line, je.column);
	if (!json_is_object(*req))
		return bad(r, NULL, "the body must be a JSON object");
	return common_fields(*req, g, r) &&
	       (chat ? chat_prompt(*req, g, r) : completion_prompt(*req, g, r));
}

void strata__http_generate(struct strata_server *srv, bool chat,
			   const char *body, size_t body_len, int fd,
			   strata__http_reply *r, strata__http_job **job)
{
	*job = NULL;
	r->body = NULL;
	gen_params g = {.tok = srv->o.tokenizer,
			.chat_format = srv->o.chat_format, .stop_token = -1};
	json_t *req = NULL;
	bool ok = strata__http_parse_body(chat, body, body_len, &g, &req, r);
	strata__http_job *j = ok ? start(srv, chat, &g, fd, r) : NULL;
	json_decref(req); /* the job's matcher copied the stops */
	strata_free(g.ids);
	if (!j)
		return;
	atomic_fetch_add(chat ? &srv->counts.chat_completions
			      : &srv->counts.completions,
			 1);
	if (g.stream) {
		atomic_fetch_add(&srv->counts.streams, 1);
		*job = j;
		return;
	}
	wait_job(j);
	whole_answer(j, r);
	strata__http_job_unref(j);
}
