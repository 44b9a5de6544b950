/* http.c - the HTTP server on libmicrohttpd: one thread per connection,
 * bodies read up to a bound, the Bearer key checked, requests routed to the
 * OpenAI handlers (http_api.c), /v1/models, /health, /metrics and the chat
 * page; streams sent as the scheduler's worker produces them (layer:
 * serve).
 *
 * Built without libmicrohttpd, strata_server_create says so (E_UNSUPPORTED)
 * and everything else of the library is unchanged.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve/http_internal.h"

#ifndef STRATA_HAVE_MHD

strata_status strata_server_create(const strata_server_options *o,
				   strata_server **out, strata_error *err)
{
	(void)o;
	(void)out;
	return strata_fail(err, STRATA_E_UNSUPPORTED,
			   "install libmicrohttpd-dev (scripts/setup) and "
			   "build strata again",
			   "this strata was built without HTTP "
			   "(libmicrohttpd was not found)");
}

uint16_t strata_server_port(const strata_server *s)
{
	(void)s;
	return 0;
}

void strata_server_quiesce(strata_server *s)
{
	(void)s;
}

void strata_server_destroy(strata_server *s)
{
	(void)s;
}

#else

#include <microhttpd.h>

/* One connection's request: its body as it arrives. */
typedef struct conn {
	char *body;
	size_t len, cap;
	bool too_large;
	bool answered; /* a reply was queued during the upload */
} conn;

/* ------------------------------------------------------------------------ */
/* Replies                                                                  */
/* ------------------------------------------------------------------------ */

static void count_status(strata_server *srv, unsigned status)
{
	static const unsigned known[] = {200, 400, 401, 404, 413, 503};
	for (size_t i = 0; i < 6; i++)
		if (status == known[i]) {
			atomic_fetch_add(&srv->counts.responses[i], 1);
			return;
		}
	if (status >= 500)
		atomic_fetch_add(&srv->counts.server_errors, 1);
	else
		atomic_fetch_add(&srv->counts.other_4xx, 1);
}

static enum MHD_Result send_bytes(strata_server *srv, struct MHD_Connection *c,
				  unsigned status, const char *type,
				  const char *bytes, size_t len)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		len, (void *)bytes, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", type);
	if (status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	count_status(srv, status);
	enum MHD_Result rc = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* Sends r (and frees its body). */
static enum MHD_Result send_reply(strata_server *srv, struct MHD_Connection *c,
				  strata__http_reply *r)
{
	char *s = r->body ? json_dumps(r->body, JSON_COMPACT) : NULL;
	json_decref(r->body);
	r->body = NULL;
	static const char oom[] =
		"{\"error\":{\"message\":\"out of memory\",\"type\":"
		"\"server_error\",\"param\":null,\"code\":\"out_of_memory\"}}";
	if (!s)
		return send_bytes(srv, c, 503, "application/json", oom,
				  sizeof oom - 1);
	enum MHD_Result rc = send_bytes(srv, c, r->status, "application/json",
					s, strlen(s));
	free(s);
	return rc;
}

static enum MHD_Result send_error(strata_server *srv, struct MHD_Connection *c,
				  unsigned status, const char *code,
				  const char *msg)
{
	strata__http_reply r;
	const char *type = status == 401   ? "authentication_error"
			   : status == 503 ? "server_error"
					   : "invalid_request_error";
	strata__http_error(&r, status, type, code, NULL, "%s", msg);
	return send_reply(srv, c, &r);
}

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */
/* ------------------------------------------------------------------------ */

/* MHD asks for the next bytes of a stream: whatever the job has, waiting
 * for more while it runs; a client that left cancels its request. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	strata__http_job *j = cls;
	pthread_mutex_lock(&j->mu);
	while (j->out_sent == j->out_len && !j->done) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&j->cv, &j->mu, &ts);
		if (j->out_sent == j->out_len && !j->done &&
		    strata__http_client_gone(j->fd)) {
			pthread_mutex_unlock(&j->mu);
			atomic_fetch_add(&j->srv->counts.client_gone, 1);
			strata__http_job_cancel(j);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
	size_t n = j->out_len - j->out_sent;
	if (n > max)
		n = max;
	memcpy(buf, j->out + j->out_sent, n);
	j->out_sent += n;
	bool end = n == 0 && j->done;
	pthread_mutex_unlock(&j->mu);
	return end ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

/* The stream's response is gone (sent, or the connection closed): a
 * request still running is cancelled, and the connection's reference
 * dropped. */
static void stream_free(void *cls)
{
	strata__http_job *j = cls;
	pthread_mutex_lock(&j->mu);
	bool running = !j->done;
	pthread_mutex_unlock(&j->mu);
	if (running)
		strata__http_job_cancel(j);
	strata__http_job_unref(j);
}

static enum MHD_Result send_stream(strata_server *srv,
				   struct MHD_Connection *c,
				   strata__http_job *j)
{
	struct MHD_Response *resp = MHD_create_response_from_callback(
		MHD_SIZE_UNKNOWN, 16384, stream_read, j, stream_free);
	if (!resp) {
		stream_free(j);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	count_status(srv, 200);
	enum MHD_Result rc = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Routes                                                                   */
/* ------------------------------------------------------------------------ */

/* Compares in time that does not depend on where they differ. */
static bool same_key(const char *got, const char *want)
{
	size_t gl = strlen(got), wl = strlen(want);
	unsigned char d = gl != wl;
	for (size_t i = 0; i < wl; i++)
		d |= (unsigned char)(got[i < gl ? i : 0] ^ want[i]);
	return d == 0;
}

static bool authorized(strata_server *srv, struct MHD_Connection *c)
{
	if (!srv->api_key)
		return true;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						    "Authorization");
	return h && !strncmp(h, "Bearer ", 7) && same_key(h + 7, srv->api_key);
}

static enum MHD_Result models(strata_server *srv, struct MHD_Connection *c)
{
	strata__http_reply r = {200, NULL};
	r.body = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s}]}", "object",
			   "list", "data", "id", srv->model_name, "object",
			   "model", "created", (json_int_t)0, "owned_by",
			   "strata", "precision",
			   strata_precision_name(srv->o.precision));
	return send_reply(srv, c, &r);
}

static enum MHD_Result health(strata_server *srv, struct MHD_Connection *c)
{
	bool draining = atomic_load(&srv->draining);
	const char *body = draining ? "{\"status\":\"shutting down\"}"
				    : "{\"status\":\"ok\"}";
	return send_bytes(srv, c, draining ? 503 : 200, "application/json",
			  body, strlen(body));
}

/* Prometheus text format 0.0.4 (http_metrics.c). */
static enum MHD_Result metrics(strata_server *srv, struct MHD_Connection *c)
{
	char *buf = NULL;
	size_t len = 0;
	bool ok = strata__http_metrics_text(srv, &buf, &len);
	enum MHD_Result rc =
		ok ? send_bytes(srv, c, 200, "text/plain; version=0.0.4", buf,
				len)
		   : send_error(srv, c, 503, "out_of_memory",
				"the server is out of memory");
	free(buf);
	return rc;
}

static enum MHD_Result generate(strata_server *srv, struct MHD_Connection *c,
				conn *k, bool chat)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
		c, MHD_CONNECTION_INFO_CONNECTION_FD);
	int fd = ci ? ci->connect_fd : -1;
	strata__http_reply r = {0};
	strata__http_job *j = NULL;
	strata__http_generate(srv, chat, k->body ? k->body : "", k->len, fd,
			      &r, &j);
	return j ? send_stream(srv, c, j) : send_reply(srv, c, &r);
}

static enum MHD_Result route(strata_server *srv, struct MHD_Connection *c,
			     conn *k, const char *url, const char *method)
{
	bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	bool post = !strcmp(method, "POST");
	if (!strcmp(url, "/health"))
		return get ? health(srv, c)
			   : send_error(srv, c, 405, "method_not_allowed",
					"use GET /health");
	if (!strcmp(url, "/") || !strcmp(url, "/index.html"))
		return get ? send_bytes(srv, c, 200, "text/html; charset=utf-8",
					strata__chat_page,
					strata__chat_page_len)
			   : send_error(srv, c, 405, "method_not_allowed",
					"use GET /");
	if (!authorized(srv, c))
		return send_error(srv, c, 401, "invalid_api_key",
				  "a valid API key is required: send "
				  "'Authorization: Bearer KEY'");
	struct {
		const char *path;
		bool post;
	} routes[] = {{"/v1/completions", true},
		      {"/v1/chat/completions", true},
		      {"/v1/models", false},
		      {"/metrics", false}};
	for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
		if (strcmp(url, routes[i].path))
			continue;
		if (routes[i].post ? !post : !get) {
			char msg[128];
			snprintf(msg, sizeof msg, "use %s %s",
				 routes[i].post ? "POST" : "GET", url);
			return send_error(srv, c, 405, "method_not_allowed",
					  msg);
		}
		if (i < 2 && k->too_large) {
			char msg[160];
			snprintf(msg, sizeof msg,
				 "the body is larger than the server takes "
				 "(%llu bytes)",
				 (unsigned long long)srv->o.max_body_bytes);
			return send_error(srv, c, 413, "request_too_large",
					  msg);
		}
		if (i < 2)
			return generate(srv, c, k, i == 1);
		return i == 2 ? models(srv, c) : metrics(srv, c);
	}
	char msg[200];
	snprintf(msg, sizeof msg, "no such route: %.16s %.120s", method, url);
	return send_error(srv, c, 404, "not_found", msg);
}

/* MHD's access handler: first call makes the connection's record, the
 * following ones bring the body, the last (no more data) answers. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	(void)version;
	strata_server *srv = cls;
	conn *k = *con_cls;
	if (!k) {
		k = strata_alloc(sizeof *k);
		if (!k)
			return MHD_NO;
		memset(k, 0, sizeof *k);
		*con_cls = k;
		atomic_fetch_add(&srv->active, 1);
		const char *cl = MHD_lookup_connection_value(
			c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > srv->o.max_body_bytes)
			k->too_large = true;
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (k->too_large || k->len + n > srv->o.max_body_bytes) {
			k->too_large = true;
			return MHD_YES; /* read and dropped; 413 at the end */
		}
		if (k->len + n + 1 > k->cap) {
			size_t cap = k->cap ? k->cap : 4096;
			while (cap < k->len + n + 1)
				cap *= 2;
			char *b = strata_realloc(k->body, cap);
			if (!b)
				return MHD_NO;
			k->body = b;
			k->cap = cap;
		}
		memcpy(k->body + k->len, upload, n);
		k->len += n;
		return MHD_YES;
	}
	return route(srv, c, k, url, method);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	(void)c;
	(void)toe;
	strata_server *srv = cls;
	conn *k = *con_cls;
	if (k) {
		strata_free(k->body);
		strata_free(k);
		atomic_fetch_sub(&srv->active, 1);
	}
	*con_cls = NULL;
}

/* ------------------------------------------------------------------------ */

static char *dup_or_null(const char *s)
{
	if (!s)
		return NULL;
	size_t n = strlen(s) + 1;
	char *d = strata_alloc(n);
	if (d)
		memcpy(d, s, n);
	return d;
}

static void free_server(strata_server *s)
{
	strata_router_destroy(s->own_router);
	strata_free(s->api_key);
	strata_free(s->model_name);
	strata_free(s);
}

/* The address to listen on: IPv4 or IPv6 text. */
static strata_status parse_host(const char *host, uint16_t port,
				struct sockaddr_storage *ss, bool *v6,
				strata_error *err)
{
	memset(ss, 0, sizeof *ss);
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		*v6 = false;
		return STRATA_OK;
	}
	if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		*v6 = true;
		return STRATA_OK;
	}
	return strata_fail(err, STRATA_E_INVALID_ARG,
			   "give an IPv4 or IPv6 address (127.0.0.1, ::1, "
			   "0.0.0.0)",
			   "--host '%.100s' is not an address", host);
}

strata_status strata_server_create(const strata_server_options *o,
				   strata_server **out, strata_error *err)
{
	if (!o || !out || (!o->scheduler && !o->router) || !o->tokenizer)
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "this is a bug in the caller",
				   "server: a router or a scheduler, and a "
				   "tokenizer, are needed");
	struct sockaddr_storage ss;
	bool v6 = false;
	strata_status st = parse_host(o->host ? o->host : "127.0.0.1", o->port,
				      &ss, &v6, err);
	if (st)
		return st;
	strata_server *s = strata_calloc_or_error(1, sizeof *s, "server", err);
	if (!s)
		return STRATA_E_NOMEM;
	s->o = *o;
	s->api_key = dup_or_null(o->api_key && o->api_key[0] ? o->api_key
							     : NULL);
	s->model_name = dup_or_null(o->model_name ? o->model_name : "strata");
	if (!s->model_name || (o->api_key && o->api_key[0] && !s->api_key)) {
		free_server(s);
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "out of memory for the server");
	}
	s->router = o->router;
	if (!s->router) {
		strata_router_options ro = {.schedulers = &s->o.scheduler,
					    .count = 1};
		if ((st = strata_router_create(&ro, &s->own_router, err))) {
			free_server(s);
			return st;
		}
		s->router = s->own_router;
	}
	if (!s->o.max_body_bytes)
		s->o.max_body_bytes = (uint64_t)4 << 20;
	if (!s->o.max_connections)
		s->o.max_connections = 512;
	if (!s->o.default_max_tokens)
		s->o.default_max_tokens = 256;
	atomic_store(&s->next_job, 1);
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
			 MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
			 (v6 ? MHD_USE_IPv6 : 0);
	s->daemon = MHD_start_daemon(
		flags, 0, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR,
		(struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, completed,
		s, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)s->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned)600, MHD_OPTION_END);
	if (!s->daemon) {
		free_server(s);
		return strata_fail(err, STRATA_E_IO,
				   "pick another --port, or stop what "
				   "listens there",
				   "cannot listen on %s port %u",
				   o->host ? o->host : "127.0.0.1",
				   (unsigned)o->port);
	}
	const union MHD_DaemonInfo *di =
		MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : o->port;
	*out = s;
	return STRATA_OK;
}

uint16_t strata_server_port(const strata_server *s)
{
	return s->port;
}

void strata_server_quiesce(strata_server *s)
{
	if (!s)
		return;
	atomic_store(&s->draining, true);
	MHD_socket fd = MHD_quiesce_daemon(s->daemon);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
}

void strata_server_destroy(strata_server *s)
{
	if (!s)
		return;
	/* Answers still being sent (the scheduler drained: every one is
	 * complete in memory) get up to 10 s to reach their clients. */
	uint64_t until = strata_now_ns() + 10000000000ull;
	while (atomic_load(&s->active) && strata_now_ns() < until) {
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	MHD_stop_daemon(s->daemon);
	free_server(s);
}

#endif
