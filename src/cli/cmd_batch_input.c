/* cmd_batch_input.c - `strata batch`'s input: JSONL requests read from
 * stdin, every line validated and its prompt encoded before anything runs,
 * then parsed again a window at a time as the runner takes them
 * (layer: cli).
 *
 * Trust: stdin is untrusted. Each line is parsed by jansson with duplicate
 * keys refused; every field strata reads is checked for type and range
 * (null counting as absent); other fields are ignored, as OpenAI's API
 * ignores them, so requests written for it run unchanged. The first bad
 * line is the error and nothing runs.
 *
 * Memory: the input's bytes (at most 1 GiB) are kept for the second
 * parse. The check keeps 16 bytes per request (a hash of its id and where
 * its line is; at most MAX_REQUESTS requests) and one line's parse at a
 * time; repeated ids are found by sorting the hashes in place
 * (O(n log n)). A window keeps no JSON: each request its fixed part
 * (batch_item) and, in shared pools, its id's compact JSON, its key, its
 * stop strings and its prompt's token ids, a bounded multiple of its
 * line's bytes (or of its rendering, for messages).
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/batch_input.h"
#include "cli/commands.h"
#include "strata/shard.h"

#define MAX_INPUT_BYTES (1ull << 30)
#define MAX_TOKENS_CAP (1u << 24)
#define DEFAULT_KEY_BYTES 256
#define MAX_REQUESTS (1u << 20)
#define ID_JSON_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY)

/* ------------------------------------------------------------------------ */

/* The requests; over MAX_INPUT_BYTES is the batch input's own error. */
static strata_status read_stdin(char **out, size_t *len, strata_error *err)
{
	strata_status st = strata_cli_read_stdin(MAX_INPUT_BYTES, out, len, err);
	if (st == STRATA_E_USAGE)
		return strata_fail(err, STRATA_E_INFER_BATCH_INPUT,
				   "split the requests over several runs",
				   "the input is larger than 1 GiB");
	return st;
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

static strata_status bad(strata_error *err, uint64_t line, const char *fix,
			 const char *what)
{
	return strata_fail(err, STRATA_E_INFER_BATCH_INPUT, fix, "line %llu: %s",
			   (unsigned long long)line, what);
}

/* Field k of o, NULL when absent or null (OpenAI's "not given"). */
static json_t *field(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_null(v) ? NULL : v;
}

/* An optional non-negative integer field at most cap. */
static strata_status opt_uint(json_t *o, const char *k, uint64_t cap,
			      uint64_t *out, uint64_t line, strata_error *err)
{
	json_t *v = field(o, k);
	if (!v)
		return STRATA_OK;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > cap) {
		char what[160];
		snprintf(what, sizeof what,
			 "'%s' is not an integer in [0, %llu]", k,
			 (unsigned long long)cap);
		return bad(err, line, "give a whole non-negative number", what);
	}
	*out = (uint64_t)json_integer_value(v);
	return STRATA_OK;
}

static strata_status check_fields(json_t *o, uint64_t line, strata_error *err)
{
	json_t *id = json_object_get(o, "id");
	if (!id || !(json_is_string(id) || json_is_integer(id)))
		return bad(err, line, "give each request an \"id\"",
			   "'id' is missing or not a string or integer");
	json_t *prompt = field(o, "prompt"), *messages = field(o, "messages");
	if (prompt && messages)
		return bad(err, line, "give either \"prompt\" or \"messages\"",
			   "both 'prompt' and 'messages' given");
	if (!prompt && !messages)
		return bad(err, line, "give each request a \"prompt\" string or "
			   "a \"messages\" array",
			   "'prompt' and 'messages' are both missing");
	if (prompt && !json_is_string(prompt))
		return bad(err, line, "give each request a \"prompt\" string",
			   "'prompt' is not a string");
	json_t *key = field(o, "key");
	if (key && !json_is_string(key))
		return bad(err, line, "give \"key\" as a string",
			   "'key' is not a string");
	return STRATA_OK;
}

/* jansson holds integers as int64, so a seed in [2^63, 2^64) (which `run
 * --seed` takes) fails its parse as "too big integer". When the token it
 * stopped at is the value of a "seed" key, the seed is read here and the
 * line parsed again with 0 in its place (*big set); any other too-big
 * integer stays the parse error. */
static json_t *load_line(const char *s, size_t n, uint64_t *big_seed,
			 bool *big, json_error_t *je)
{
	*big = false;
	json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, je);
	if (o || strncmp(je->text, "too big integer", 15) || je->position < 0 ||
	    (size_t)je->position > n)
		return o;
	size_t end = (size_t)je->position, begin = end, k;
	while (begin > 0 && isdigit((unsigned char)s[begin - 1]))
		begin--;
	for (k = begin; k > 0 && isspace((unsigned char)s[k - 1]); k--)
		;
	if (begin == end || k == 0 || s[k - 1] != ':')
		return NULL;
	for (k--; k > 0 && isspace((unsigned char)s[k - 1]); k--)
		;
	if (k < 6 || memcmp(s + k - 6, "\"seed\"", 6) ||
	    (k > 6 && s[k - 7] == '\\'))
		return NULL;
	char digits[32], *stop;
	if (end - begin >= sizeof digits)
		return NULL;
	memcpy(digits, s + begin, end - begin);
	digits[end - begin] = '\0';
	errno = 0;
	unsigned long long v = strtoull(digits, &stop, 10);
	char *copy = errno || *stop ? NULL : strata_alloc(n);
	if (!copy)
		return NULL;
	memcpy(copy, s, n);
	copy[begin] = '0';
	memset(copy + begin + 1, ' ', end - begin - 1);
	o = json_loadb(copy, n, JSON_REJECT_DUPLICATES, je);
	strata_free(copy);
	*big = o != NULL;
	*big_seed = v;
	return o;
}

/* Appends len bytes to in's text pool; their offset into *at. */
static strata_status put_text(batch_input *in, const void *p, size_t len,
			      size_t *at, strata_error *err)
{
	if (strata_grow((void **)&in->text, &in->text_cap, in->text_len + len,
			1, "request ids and keys", err))
		return STRATA_E_NOMEM;
	if (len)
		memcpy(in->text + in->text_len, p, len);
	*at = in->text_len;
	in->text_len += len;
	return STRATA_OK;
}

/* The id's compact JSON into the text pool (equal ids, equal texts). */
static strata_status put_id(batch_input *in, const json_t *id, batch_item *q,
			    strata_error *err)
{
	size_t len = json_dumpb(id, NULL, 0, ID_JSON_FLAGS);
	if (strata_grow((void **)&in->text, &in->text_cap, in->text_len + len,
			1, "request ids and keys", err))
		return STRATA_E_NOMEM;
	q->id_at = in->text_len;
	q->id_len = (uint32_t)json_dumpb(id, in->text + in->text_len, len,
					 ID_JSON_FLAGS);
	in->text_len += q->id_len;
	return STRATA_OK;
}

/* The prompt's ids into the token pool; their offset into *at. */
static strata_status put_tokens(batch_input *in, const int32_t *ids,
				size_t count, size_t *at, strata_error *err)
{
	if (strata_grow((void **)&in->tokens, &in->tokens_cap,
			in->tokens_len + count, sizeof *in->tokens,
			"prompt tokens", err))
		return STRATA_E_NOMEM;
	memcpy(in->tokens + in->tokens_len, ids, count * sizeof *ids);
	*at = in->tokens_len;
	in->tokens_len += count;
	return STRATA_OK;
}

/* An optional number field in [lo, hi] ((lo, hi] when lo_open). */
static strata_status opt_float(json_t *o, const char *k, double lo,
			       bool lo_open, double hi, float *out,
			       uint64_t line, strata_error *err)
{
	json_t *v = field(o, k);
	if (!v)
		return STRATA_OK;
	double x = json_number_value(v);
	if (!json_is_number(v) || !(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
		char what[160], fix[96];
		snprintf(what, sizeof what, "'%s' is not a number in %c%g, %g]",
			 k, lo_open ? '(' : '[', lo, hi);
		snprintf(fix, sizeof fix, "give %s as a number in %c%g, %g]", k,
			 lo_open ? '(' : '[', lo, hi);
		return bad(err, line, fix, what);
	}
	*out = (float)x;
	return STRATA_OK;
}

/* "stop": a string or an array of strings (OpenAI), each checked by the
 * stop matcher's rules, into the stop pool. */
static strata_status parse_stop(json_t *o, uint64_t line, batch_input *in,
				batch_item *q, strata_error *err)
{
	json_t *v = field(o, "stop");
	q->stop_default = v == NULL;
	if (!v)
		return STRATA_OK;
	bool one = json_is_string(v);
	size_t n = one ? 1 : json_array_size(v);
	if (!one && !json_is_array(v))
		return bad(err, line, "give \"stop\" as a string or an array of "
			   "strings", "'stop' is not a string or an array");
	if (n > STRATA_STOP_MAX_COUNT)
		return bad(err, line, "give at most 32 stop strings",
			   "'stop' holds more than 32 strings");
	q->stop_at = in->stops_len;
	for (size_t i = 0; i < n; i++) {
		json_t *s = one ? v : json_array_get(v, i);
		const char *p = json_string_value(s);
		size_t len = json_string_length(s);
		strata_stop_matcher *m = NULL;
		strata_status st = p ? strata_stop_matcher_create(&p, &len, 1, &m,
								  err)
				     : bad(err, line, "give \"stop\" as strings",
					   "'stop' holds something that is not "
					   "a string");
		strata_stop_matcher_destroy(m);
		if (st == STRATA_E_INVALID_ARG && p)
			return bad(err, line, "give non-empty stop strings of at "
				   "most 1024 bytes", strstr(err->message,
							     "is empty")
				   ? "'stop' holds an empty string"
				   : "'stop' holds a string over 1024 bytes");
		size_t at = 0;
		if (st || (st = strata_grow((void **)&in->stops, &in->stops_cap,
					    in->stops_len + 1, sizeof *in->stops,
					    "stop strings", err)) ||
		    (st = put_text(in, p, len, &at, err)))
			return st;
		in->stops[in->stops_len++] = (batch_stop){at, len};
	}
	q->stop_count = (uint32_t)n;
	return STRATA_OK;
}

/* The sampler and length fields of object o into q. */
static strata_status parse_numbers(const batch_input_options *bo, json_t *o,
				   uint64_t line, const uint64_t *big_seed,
				   batch_item *q, strata_error *err)
{
	uint64_t max_tokens = bo->default_max_tokens, seed = bo->sampler.seed;
	strata_status st = opt_uint(o, "max_tokens", MAX_TOKENS_CAP,
				    &max_tokens, line, err);
	if (st == STRATA_OK)
		st = opt_uint(o, "seed", INT64_MAX, &seed, line, err);
	if (st)
		return st;
	q->req.sampler = bo->sampler;
	q->req.sampler.seed = big_seed ? *big_seed : seed;
	q->req.max_tokens = (uint32_t)max_tokens;
	uint64_t top_k = q->req.sampler.top_k;
	if ((st = opt_uint(o, "top_k", UINT32_MAX, &top_k, line, err)))
		return st;
	q->req.sampler.top_k = (uint32_t)top_k;
	if ((st = opt_float(o, "temperature", 0, false, 1e6,
			    &q->req.sampler.temperature, line, err)) ||
	    (st = opt_float(o, "top_p", 0, true, 1, &q->req.sampler.top_p,
			    line, err)) ||
	    (st = opt_float(o, "min_p", 0, false, 1, &q->req.sampler.min_p,
			    line, err)))
		return st;
	return STRATA_OK;
}

/* "messages" rendered through the model's chat template into *text
 * (strata_alloc'd): the generation prompt added, as the server does. */
static strata_status render_messages(const batch_input_options *bo,
				     json_t *messages, uint64_t line,
				     char **text, size_t *len,
				     strata_error *err)
{
	strata_status st;
	if (!bo->chat) {
		if (bo->chat_error.code)
			*err = bo->chat_error;
		else
			strata_fail(err, STRATA_E_NOT_FOUND, "pass a chat template",
				    "no chat template to render messages with");
		st = err->code;
	} else {
		st = strata_chat_format_render(bo->chat, messages, true, text,
					       len, err);
	}
	if (st)
		strata_error_prefix(err, "line %llu", (unsigned long long)line);
	if (st == STRATA_E_INVALID_ARG || st == STRATA_E_TEXT_TEMPLATE_RAISED)
		err->code = STRATA_E_INFER_BATCH_INPUT; /* the line is bad */
	return st ? err->code : STRATA_OK;
}

/* The prompt's ids (the text of "prompt" with the tokenizer's BOS rule,
 * or the rendering of "messages" as it is) and the key of object o into
 * the pools; q->req's prompt and key hold pool offsets until
 * batch_input_parse ends (the pools move as they grow). */
static strata_status parse_prompt(const batch_input_options *bo, json_t *o,
				  uint64_t line, batch_input *in,
				  batch_item *q, strata_error *err)
{
	json_t *p = field(o, "prompt"), *messages = field(o, "messages");
	char *rendered = NULL;
	const char *text = json_string_value(p);
	size_t len = json_string_length(p), count = 0, at = 0;
	int32_t *ids = NULL;
	strata_status st = STRATA_OK;
	q->chat = messages != NULL;
	if (q->chat) {
		st = render_messages(bo, messages, line, &rendered, &len, err);
		text = rendered;
	}
	if (st == STRATA_OK &&
	    (st = strata_tokenizer_encode(bo->tok, text, len, !q->chat, &ids,
					  &count, err)))
		strata_error_prefix(err, "line %llu", (unsigned long long)line);
	if (st == STRATA_OK && (count == 0 || count > UINT32_MAX - MAX_TOKENS_CAP))
		st = bad(err, line,
			 "give a non-empty prompt (this tokenizer adds no "
			 "BOS token)",
			 count ? "the prompt is too long"
			       : "the prompt encodes to no tokens");
	if (st == STRATA_OK)
		st = put_tokens(in, ids, count, &at, err);
	strata_free(ids);
	if (st == STRATA_OK) {
		q->req.prompt = (const int32_t *)(uintptr_t)at;
		q->req.n_prompt = (uint32_t)count;
		json_t *key = field(o, "key");
		const char *kp = key ? json_string_value(key) : text;
		q->req.key_bytes = key ? json_string_length(key)
				       : (len < DEFAULT_KEY_BYTES
						  ? len : DEFAULT_KEY_BYTES);
		st = put_text(in, kp, q->req.key_bytes, &at, err);
		q->req.key = (const void *)(uintptr_t)at;
	}
	strata_free(rendered);
	return st;
}

/* Parses and checks one line into *q: numbers, id, key and prompt (the
 * last three into in's pools). Keeps no JSON. */
static strata_status parse_line(const batch_input_options *bo,
				const char *s, size_t n, uint64_t line,
				batch_input *in, batch_item *q,
				strata_error *err)
{
	json_error_t je;
	uint64_t big_seed = 0;
	bool big = false;
	json_t *o = load_line(s, n, &big_seed, &big, &je);
	if (!o || !json_is_object(o)) {
		char what[256];
		snprintf(what, sizeof what, "not a JSON object (%s)",
			 o ? "another JSON value" : je.text);
		json_decref(o);
		return bad(err, line,
			   "write one JSON object per line, e.g. "
			   "{\"id\": 1, \"prompt\": \"Once\"}",
			   what);
	}
	q->line = line;
	strata_status st = check_fields(o, line, err);
	if (st == STRATA_OK)
		st = parse_numbers(bo, o, line, big ? &big_seed : NULL, q, err);
	if (st == STRATA_OK)
		st = parse_stop(o, line, in, q, err);
	if (st == STRATA_OK)
		st = put_id(in, json_object_get(o, "id"), q, err);
	if (st == STRATA_OK)
		st = parse_prompt(bo, o, line, in, q, err);
	json_decref(o);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Repeated ids                                                             */
/* ------------------------------------------------------------------------ */

/* What the id check keeps of one request (16 bytes): a hash of its id's
 * compact JSON and where its line is. Equal ids have equal texts, so
 * equal hashes; equal hashes are compared again from the lines. */
typedef struct id_seen {
	uint64_t hash;
	uint32_t line; /* 1-based line number (the input is at most 1 GiB) */
	uint32_t at;   /* the line's first byte */
} id_seen;

static uint64_t id_hash(const char *text, size_t len)
{
	uint8_t d[8];
	strata_shard_hash(text, len, d, sizeof d);
	uint64_t h = 0;
	for (int i = 7; i >= 0; i--)
		h = h << 8 | d[i];
	return h;
}

static bool seen_before(const id_seen *a, const id_seen *b)
{
	return a->hash != b->hash ? a->hash < b->hash : a->line < b->line;
}

/* Heapsort by (hash, line), in place: glibc's qsort takes a copy of the
 * array, which would double the check's memory at its peak. */
static void sift(id_seen *v, size_t root, size_t n)
{
	for (size_t child; (child = 2 * root + 1) < n; root = child) {
		if (child + 1 < n && seen_before(&v[child], &v[child + 1]))
			child++;
		if (!seen_before(&v[root], &v[child]))
			return;
		id_seen t = v[root];
		v[root] = v[child];
		v[child] = t;
	}
}

static void sort_seen(id_seen *v, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift(v, i, n);
	for (size_t end = n; end-- > 1;) {
		id_seen t = v[0];
		v[0] = v[end];
		v[end] = t;
		sift(v, 0, end);
	}
}

/* The compact JSON of the id on the (checked) line at buf[at], into the
 * text pool of scratch (emptied first). */
static strata_status id_of_line(const char *buf, size_t len, size_t at,
				batch_input *scratch, batch_item *q,
				strata_error *err)
{
	const char *nl = memchr(buf + at, '\n', len - at);
	size_t n = nl ? (size_t)(nl - (buf + at)) : len - at;
	uint64_t big_seed;
	bool big;
	json_error_t je;
	json_t *o = load_line(buf + at, n, &big_seed, &big, &je);
	strata_status st = o ? put_id(scratch, json_object_get(o, "id"), q, err)
			     : strata_fail(err, STRATA_E_NOMEM, "free memory",
					   "cannot parse a request again");
	json_decref(o);
	return st;
}

/* Whether the lines of a and b have equal ids (their hashes are equal). */
static strata_status same_id(const char *buf, size_t len, const id_seen *a,
			     const id_seen *b, batch_input *scratch, bool *same,
			     strata_error *err)
{
	batch_item qa = {0}, qb = {0};
	scratch->text_len = 0;
	strata_status st = id_of_line(buf, len, a->at, scratch, &qa, err);
	if (st == STRATA_OK)
		st = id_of_line(buf, len, b->at, scratch, &qb, err);
	*same = st == STRATA_OK && qa.id_len == qb.id_len &&
		!memcmp(scratch->text + qa.id_at, scratch->text + qb.id_at,
			qa.id_len);
	return st;
}

/* In each run of equal hashes (sorted by line), the first entry whose id
 * an earlier one of the run has: its line into *rep and that earlier
 * one's into *first (*rep untouched when there is none). Distinct ids
 * share a 64-bit hash with odds of about n^2 / 2^65, so a run is almost
 * always one id and its first repeat is its second entry. */
static strata_status first_repeat(const char *buf, size_t len,
				  const id_seen *v, size_t n,
				  batch_input *scratch, uint32_t *rep,
				  uint32_t *first, strata_error *err)
{
	for (size_t s = 0, e; s < n; s = e) {
		for (e = s + 1; e < n && v[e].hash == v[s].hash; e++)
			;
		bool found = false;
		for (size_t j = s + 1; j < e && !found && v[j].line < *rep; j++)
			for (size_t i = s; i < j && !found; i++) {
				strata_status st = same_id(buf, len, &v[i],
							   &v[j], scratch,
							   &found, err);
				if (st)
					return st;
				if (found) {
					*rep = v[j].line;
					*first = v[i].line;
				}
			}
	}
	return STRATA_OK;
}

/* An id seen on an earlier line is an error: results are matched by id.
 * The error is the first line (in input order) repeating an earlier id,
 * naming the first line that had it; sorting makes it O(n log n). */
static strata_status check_unique_ids(const char *buf, size_t len,
				      id_seen *v, size_t n,
				      batch_input *scratch, strata_error *err)
{
	sort_seen(v, n);
	uint32_t rep = UINT32_MAX, first = 0;
	strata_status st = first_repeat(buf, len, v, n, scratch, &rep, &first,
					err);
	if (st || rep == UINT32_MAX)
		return st;
	char what[96];
	snprintf(what, sizeof what, "'id' repeats the id of line %llu",
		 (unsigned long long)first);
	return bad(err, rep, "give every request its own id", what);
}

/* ------------------------------------------------------------------------ */
/* Windows of requests                                                      */
/* ------------------------------------------------------------------------ */

/* Pool offsets into pointers, once the pools no longer move. */
static void fix_pointers(batch_input *in)
{
	for (size_t i = 0; i < in->count; i++) {
		strata_batch_request *q = &in->items[i].req;
		q->prompt = in->tokens + (uintptr_t)q->prompt;
		q->key = in->text + (uintptr_t)q->key;
	}
}

/* The next item slot (grown by doubling); NULL with err filled. */
static batch_item *next_item(batch_input *in, strata_error *err)
{
	if (strata_grow((void **)&in->items, &in->items_cap, in->count + 1,
			sizeof *in->items, "requests", err))
		return NULL;
	batch_item *q = &in->items[in->count];
	memset(q, 0, sizeof *q);
	return q;
}

/* Empties in, keeping its pools for the next window. */
static void input_clear(batch_input *in)
{
	in->count = 0;
	in->text_len = in->tokens_len = in->stops_len = 0;
}

/* The line at buf[*at] (n bytes, without its newline); *at moves past it. */
static size_t take_line(const char *buf, size_t len, size_t *at)
{
	const char *nl = memchr(buf + *at, '\n', len - *at);
	size_t n = nl ? (size_t)(nl - (buf + *at)) : len - *at;
	*at += n + 1;
	return n;
}

/* One checked line (at buf[at], n bytes) into the source's figures and
 * its id into v[src->count]. scratch holds its parse until the next. */
static strata_status check_line(const batch_input_options *bo,
				const char *buf, size_t at, size_t n,
				uint64_t line, batch_source *src,
				batch_input *scratch, id_seen *v,
				strata_error *err)
{
	if (src->count == MAX_REQUESTS)
		return bad(err, line, "split the requests over several runs",
			   "more than 1048576 requests");
	input_clear(scratch);
	batch_item *q = next_item(scratch, err);
	strata_status st = q ? parse_line(bo, buf + at, n, line, scratch, q,
					  err)
			     : err->code;
	if (st)
		return st;
	uint64_t need = (uint64_t)q->req.n_prompt + q->req.max_tokens;
	src->positions = need > src->positions ? need : src->positions;
	if (q->req.n_prompt > src->prefill)
		src->prefill = q->req.n_prompt;
	v[src->count++] = (id_seen){id_hash(scratch->text + q->id_at,
					    q->id_len),
				    (uint32_t)line, (uint32_t)at};
	return STRATA_OK;
}

/* Every line of the source checked (its figures counted), then its ids. */
static strata_status check_all(const batch_input_options *bo,
			       batch_source *src, batch_input *scratch,
			       strata_error *err)
{
	id_seen *v = NULL;
	size_t cap = 0;
	strata_status st = STRATA_OK;
	uint64_t line = 0;
	for (size_t at = 0; st == STRATA_OK && at < src->len;) {
		size_t start = at, n = take_line(src->buf, src->len, &at);
		line++;
		if (blank(src->buf + start, n))
			continue;
		if ((st = strata_grow((void **)&v, &cap, src->count + 1,
				      sizeof *v, "request ids", err)) == 0)
			st = check_line(bo, src->buf, start, n, line, src,
					scratch, v, err);
	}
	if (st == STRATA_OK)
		st = check_unique_ids(src->buf, src->len, v, src->count,
				      scratch, err);
	if (st == STRATA_OK && src->count == 0)
		st = strata_fail(err, STRATA_E_INFER_BATCH_INPUT,
				 "send one JSON request per line on stdin",
				 "no requests on stdin");
	strata_free(v);
	return st;
}

/* ------------------------------------------------------------------------ */

strata_status batch_source_check(const batch_input_options *bo,
				 const char *buf, size_t len,
				 batch_source *src, strata_error *err)
{
	memset(src, 0, sizeof *src);
	if (len > MAX_INPUT_BYTES)
		return strata_fail(err, STRATA_E_INFER_BATCH_INPUT,
				   "split the requests over several runs",
				   "the input is larger than 1 GiB");
	src->buf = (char *)buf;
	src->len = len;
	batch_input scratch = {0};
	strata_status st = check_all(bo, src, &scratch, err);
	batch_input_fini(&scratch);
	if (st)
		memset(src, 0, sizeof *src);
	return st;
}

strata_status batch_source_read(const batch_input_options *bo,
				batch_source *src, strata_error *err)
{
	memset(src, 0, sizeof *src);
	char *buf = NULL;
	size_t len = 0;
	strata_status st = read_stdin(&buf, &len, err);
	if (st == STRATA_OK)
		st = batch_source_check(bo, buf, len, src, err);
	if (st) {
		strata_free(buf);
		return st;
	}
	src->owned = true;
	return STRATA_OK;
}

strata_status batch_source_next(const batch_input_options *bo,
				batch_source *src, size_t max,
				batch_input *in, strata_error *err)
{
	input_clear(in);
	size_t at = src->at;
	uint64_t line = src->line;
	strata_status st = STRATA_OK;
	while (st == STRATA_OK && in->count < max && at < src->len) {
		size_t start = at, n = take_line(src->buf, src->len, &at);
		line++;
		if (blank(src->buf + start, n))
			continue;
		batch_item *q = next_item(in, err);
		st = q ? parse_line(bo, src->buf + start, n, line, in, q, err)
		       : err->code;
		in->count += st == STRATA_OK;
	}
	if (st) {
		batch_input_fini(in);
		return st;
	}
	src->at = at;
	src->line = line;
	src->taken += in->count;
	fix_pointers(in);
	return STRATA_OK;
}

void batch_source_fini(batch_source *src)
{
	if (src->owned)
		strata_free(src->buf);
	memset(src, 0, sizeof *src);
}

strata_status batch_input_parse(const batch_input_options *bo,
				const char *buf, size_t len, batch_input *in,
				strata_error *err)
{
	memset(in, 0, sizeof *in);
	batch_source src;
	strata_status st = batch_source_check(bo, buf, len, &src, err);
	if (st == STRATA_OK)
		st = batch_source_next(bo, &src, SIZE_MAX, in, err);
	batch_source_fini(&src);
	return st;
}

const char *batch_input_id(const batch_input *in, size_t i, size_t *len)
{
	*len = in->items[i].id_len;
	return in->text + in->items[i].id_at;
}

long batch_input_stops(const batch_input *in, size_t i, const char **v,
		       size_t *lens)
{
	const batch_item *q = &in->items[i];
	if (q->stop_default)
		return -1;
	for (uint32_t k = 0; k < q->stop_count; k++) {
		const batch_stop *s = &in->stops[q->stop_at + k];
		v[k] = in->text + s->at;
		lens[k] = s->len;
	}
	return q->stop_count;
}

void batch_input_fini(batch_input *in)
{
	strata_free(in->items);
	strata_free(in->text);
	strata_free(in->tokens);
	strata_free(in->stops);
	memset(in, 0, sizeof *in);
}
