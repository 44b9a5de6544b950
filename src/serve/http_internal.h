/* http_internal.h - the HTTP server's parts shared by http.c (the daemon,
 * routing, errors, metrics, the page) and http_api.c (OpenAI requests and
 * their answers) (layer: serve). Not a public header. */
#ifndef STRATA_SERVE_HTTP_INTERNAL_H
#define STRATA_SERVE_HTTP_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "strata/serve.h"
#include "strata/text.h"

#define STRATA__HTTP_MAX_STOPS 4u /* OpenAI's bound */

/* An answer the handler decided on: a status and a JSON body (owned). */
typedef struct strata__http_reply {
	unsigned status;
	json_t *body;
} strata__http_reply;

/* A request's generation, shared by the connection's thread (which waits
 * on it or streams from it) and the scheduler's worker (which feeds it
 * through the event callback). Freed when both let go (refs). */
typedef struct strata__http_job {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;
	struct strata_server *srv;
	uint64_t id;	      /* the scheduler's */
	uint32_t replica;     /* whose scheduler runs it */
	bool chat, stream, include_usage;
	int fd;		      /* the client's socket, for hangups */
	char name[48];	      /* "chatcmpl-N" / "cmpl-N" */
	int64_t created;
	strata_text_stream *ts;
	strata_stop_matcher *stop; /* the request's stop strings (owned) */
	char *text;	      /* generated text, cut at a stop string */
	size_t text_len, text_cap;
	char *out;	      /* SSE bytes to send */
	size_t out_len, out_cap, out_sent;
	bool stopped;	      /* a stop string matched */
	bool done;
	bool failed_alloc;    /* an append failed: the answer is cut */
	strata_scheduler_finish finish;
	char fail_message[sizeof ((strata_error *)0)->message];
	uint32_t prompt_tokens, completion_tokens;
} strata__http_job;

/* The server's figures for /metrics (atomics: every thread counts). */
typedef struct strata__http_counts {
	atomic_uint_fast64_t responses[6]; /* 2xx 4xx:400 401 404 413 503 */
	atomic_uint_fast64_t other_4xx, server_errors;
	atomic_uint_fast64_t completions, chat_completions, streams;
	atomic_uint_fast64_t client_gone;
	atomic_uint_fast64_t refused; /* 503: every replica's queue full,
					 or shutting down */
} strata__http_counts;

/* Requests are routed by their first this many prompt tokens unless they
 * give OpenAI's prompt_cache_key: a conversation's start (the template's
 * header, the system prompt, the first message) stays the same as it
 * grows, so its turns meet their prefix on one replica. */
#define STRATA__HTTP_ROUTE_TOKENS 32u

struct strata_server {
	strata_server_options o;
	strata_router *router; /* o.router, or own_router */
	strata_router *own_router; /* one replica: o.scheduler */
	char *api_key, *model_name;
	struct MHD_Daemon *daemon;
	uint16_t port;
	atomic_bool draining;
	/* requests from their first byte to their answer's last (MHD's
	 * completed callback), so destroy closes no answer half sent */
	atomic_uint_fast64_t active;
	atomic_uint_fast64_t next_job;
	strata__http_counts counts;
};

/* Fills *r with an OpenAI error object {"error": {message, type, param,
 * code}}; param and code may be NULL (JSON null). */
void strata__http_error(strata__http_reply *r, unsigned status,
			const char *type, const char *code, const char *param,
			const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* A request body's fields, checked (http_api.c). ids is owned (strata_free);
 * stops point into the parsed body. */
typedef struct strata__http_params {
	int32_t *ids; /* the prompt's token ids */
	size_t n_ids;
	uint32_t max_tokens;
	bool max_given;
	strata_sampler_params sp;
	bool stream, include_usage;
	int32_t stop_token; /* the chat format's end of turn; -1: none */
	const strata_tokenizer *tok;		/* set by the caller */
	const strata_chat_format *chat_format; /* set by the caller; NULL:
						   none */
	const char *stops[STRATA__HTTP_MAX_STOPS];
	size_t stop_lens[STRATA__HTTP_MAX_STOPS];
	size_t n_stops;
	/* prompt_cache_key: the routing key (in the body's JSON, *req);
	 * NULL: none */
	const char *key;
	size_t key_len;
} strata__http_params;

/* Parses a /v1/completions (chat false) or /v1/chat/completions body of
 * body_len bytes (hostile) into *g, whose tok and chat_format the caller
 * set and whose stop_token it set to -1: every field checked, the prompt
 * encoded (a chat's messages rendered through g->chat_format first).
 * False with *r the error answer (400 naming the field, or 503 out of
 * memory). Either way *req is the parsed body or NULL, for the caller to
 * json_decref after the last use of g->stops, and g->ids the caller's to
 * strata_free. Touches no server state: fuzz_http_body drives it alone. */
bool strata__http_parse_body(bool chat, const char *body, size_t body_len,
			     strata__http_params *g, json_t **req,
			     strata__http_reply *r);

/* POST /v1/completions and /v1/chat/completions with the whole body
 * (body_len bytes). Either *r is the answer (an error, or a whole
 * completion), or *job is a started streaming job the caller sends from
 * (one reference is the caller's: strata__http_job_unref). fd is the
 * client's socket. */
void strata__http_generate(struct strata_server *srv, bool chat,
			   const char *body, size_t body_len, int fd,
			   strata__http_reply *r, strata__http_job **job);

/* Cancels the job's request on its replica. */
void strata__http_job_cancel(strata__http_job *j);

/* Drops one reference; the last frees the job. */
void strata__http_job_unref(strata__http_job *j);

/* True when the client on fd has closed its side or the socket failed. */
bool strata__http_client_gone(int fd);

/* /metrics' body (http_metrics.c): *buf from open_memstream (free()).
 * False when out of memory. */
bool strata__http_metrics_text(struct strata_server *srv, char **buf,
			       size_t *len);

/* The chat page (src/serve/chat.html, embedded at build time). */
extern const char strata__chat_page[];
extern const size_t strata__chat_page_len;

#endif
