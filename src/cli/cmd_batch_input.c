/* cmd_batch_input.c - `strata batch`'s input: JSONL requests read from
 * stdin, every line validated and its prompt encoded before anything runs
 * (layer: cli).
 *
 * Trust: stdin is untrusted. Each line is parsed by jansson with duplicate
 * keys refused; every field is checked for type and range; unknown fields
 * are refused (a misspelt `max_tokens` would otherwise silently run with
 * the default). The first bad line is the error and nothing runs.
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli/batch_input.h"

#define MAX_INPUT_BYTES (1ull << 30)
#define MAX_TOKENS_CAP (1u << 24)
#define DEFAULT_KEY_BYTES 256

/* ------------------------------------------------------------------------ */

static strata_status read_stdin(char **out, size_t *len, strata_error *err)
{
	char *buf = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 1 << 16;
			if (ncap > MAX_INPUT_BYTES + 1)
				ncap = MAX_INPUT_BYTES + 1;
			if (ncap == cap) {
				strata_free(buf);
				return strata_fail(
					err, STRATA_E_INFER_BATCH_INPUT,
					"split the requests over several runs",
					"the input is larger than 1 GiB");
			}
			char *nb = strata_realloc(buf, ncap + 1);
			if (!nb) {
				strata_free(buf);
				return strata_fail(err, STRATA_E_NOMEM,
						   "free memory or send fewer "
						   "requests",
						   "cannot hold the input");
			}
			buf = nb;
			cap = ncap;
		}
		size_t got = fread(buf + n, 1, cap - n, stdin);
		n += got;
		if (got == 0) {
			if (ferror(stdin)) {
				strata_free(buf);
				return strata_fail(err, STRATA_E_IO,
						   "check what feeds stdin",
						   "cannot read the requests "
						   "from stdin");
			}
			break;
		}
	}
	if (!buf && !(buf = strata_alloc(1)))
		return strata_fail(err, STRATA_E_NOMEM, "free memory",
				   "cannot hold the input");
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return STRATA_OK;
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

/* An optional non-negative integer field at most cap. */
static strata_status opt_uint(json_t *o, const char *k, uint64_t cap,
			      uint64_t *out, uint64_t line, strata_error *err)
{
	json_t *v = json_object_get(o, k);
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
	static const char *const known[] = {"id",   "prompt", "max_tokens",
					    "temperature", "seed", "key"};
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		bool ok = false;
		for (size_t i = 0; i < sizeof known / sizeof *known; i++)
			ok |= !strcmp(k, known[i]);
		if (!ok) {
			char shown[96], what[160];
			strata_escape(shown, sizeof shown, k, strlen(k));
			snprintf(what, sizeof what, "unknown field '%s'",
				 shown);
			return bad(err, line,
				   "use only id, prompt, max_tokens, "
				   "temperature, seed and key",
				   what);
		}
	}
	json_t *id = json_object_get(o, "id");
	if (!id || !(json_is_string(id) || json_is_integer(id)))
		return bad(err, line, "give each request an \"id\"",
			   "'id' is missing or not a string or integer");
	if (!json_is_string(json_object_get(o, "prompt")))
		return bad(err, line, "give each request a \"prompt\" string",
			   "'prompt' is missing or not a string");
	json_t *key = json_object_get(o, "key");
	if (key && !json_is_string(key))
		return bad(err, line, "give \"key\" as a string",
			   "'key' is not a string");
	return STRATA_OK;
}

/* Parses and checks one line into *q (encoding its prompt). */
static strata_status parse_line(const batch_input_options *bo,
				const char *s, size_t n, uint64_t line,
				batch_item *q, strata_error *err)
{
	json_error_t je;
	json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
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
	q->json = o;
	q->line = line;
	strata_status st = check_fields(o, line, err);
	uint64_t max_tokens = bo->default_max_tokens, seed = bo->sampler.seed;
	if (st == STRATA_OK)
		st = opt_uint(o, "max_tokens", MAX_TOKENS_CAP, &max_tokens,
			      line, err);
	if (st == STRATA_OK)
		st = opt_uint(o, "seed", INT64_MAX, &seed, line, err);
	if (st)
		return st;
	q->req.sampler = bo->sampler;
	q->req.sampler.seed = seed;
	q->req.max_tokens = (uint32_t)max_tokens;
	json_t *t = json_object_get(o, "temperature");
	if (t) {
		double v = json_number_value(t);
		if (!json_is_number(t) || !(v >= 0 && v <= 1e6))
			return bad(err, line, "give a temperature in [0, 1e6]",
				   "'temperature' is not a number in [0, 1e6]");
		q->req.sampler.temperature = (float)v;
	}
	json_t *p = json_object_get(o, "prompt");
	const char *text = json_string_value(p);
	size_t len = json_string_length(p);
	size_t count = 0;
	st = strata_tokenizer_encode(bo->tok, text, len, true, &q->ids, &count,
				     err);
	if (st)
		return strata_error_prefix(err, "line %llu",
					   (unsigned long long)line);
	if (count == 0 || count > UINT32_MAX - MAX_TOKENS_CAP)
		return bad(err, line,
			   "give a non-empty prompt (this tokenizer adds no "
			   "BOS token)",
			   count ? "the prompt is too long"
				 : "the prompt encodes to no tokens");
	q->req.prompt = q->ids;
	q->req.n_prompt = (uint32_t)count;
	json_t *key = json_object_get(o, "key");
	q->req.key = key ? json_string_value(key) : text;
	q->req.key_bytes = key ? json_string_length(key)
			       : (len < DEFAULT_KEY_BYTES ? len
							  : DEFAULT_KEY_BYTES);
	return STRATA_OK;
}

/* An id seen on an earlier line is an error: results are matched by id. */
static strata_status check_unique_ids(const batch_input *in,
				      strata_error *err)
{
	for (size_t i = 1; i < in->count; i++)
		for (size_t j = 0; j < i; j++)
			if (json_equal(json_object_get(in->items[i].json, "id"),
				       json_object_get(in->items[j].json,
						       "id"))) {
				char what[96];
				snprintf(what, sizeof what,
					 "'id' repeats the id of line %llu",
					 (unsigned long long)in->items[j].line);
				return bad(err, in->items[i].line,
					   "give every request its own id",
					   what);
			}
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */

strata_status batch_input_read(const batch_input_options *bo, batch_input *in,
			       strata_error *err)
{
	memset(in, 0, sizeof *in);
	char *buf = NULL;
	size_t len = 0;
	strata_status st = read_stdin(&buf, &len, err);
	if (st)
		return st;
	st = batch_input_parse(bo, buf, len, in, err);
	strata_free(buf);
	return st;
}

strata_status batch_input_parse(const batch_input_options *bo,
				const char *buf, size_t len, batch_input *in,
				strata_error *err)
{
	memset(in, 0, sizeof *in);
	strata_status st = STRATA_OK;
	size_t lines = 1;
	for (size_t i = 0; i < len; i++)
		lines += buf[i] == '\n';
	in->items = strata_calloc_or_error(lines, sizeof *in->items,
					   "requests", err);
	if (!in->items)
		return STRATA_E_NOMEM;
	uint64_t line = 0;
	for (size_t at = 0; st == STRATA_OK && at < len;) {
		const char *nl = memchr(buf + at, '\n', len - at);
		size_t n = nl ? (size_t)(nl - (buf + at)) : len - at;
		line++;
		if (!blank(buf + at, n)) {
			st = parse_line(bo, buf + at, n, line,
					&in->items[in->count], err);
			in->count++; /* a half-filled item is freed too */
		}
		at += n + 1;
	}
	if (st == STRATA_OK)
		st = check_unique_ids(in, err);
	if (st == STRATA_OK && in->count == 0)
		st = strata_fail(err, STRATA_E_INFER_BATCH_INPUT,
				 "send one JSON request per line on stdin",
				 "no requests on stdin");
	if (st)
		batch_input_fini(in);
	return st;
}

void batch_input_fini(batch_input *in)
{
	for (size_t i = 0; in->items && i < in->count; i++) {
		json_decref(in->items[i].json);
		strata_free(in->items[i].ids);
	}
	strata_free(in->items);
	memset(in, 0, sizeof *in);
}
