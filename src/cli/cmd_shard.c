/* cmd_shard.c - `strata shard`: place a stream of keyed items on devices
 * with the seed 000 allocator, stdin to stdout (layer: cli).
 *
 * The stream is read one line at a time in constant memory (the line
 * buffer grows to the longest line; lines are placed in batches of at most
 * 32 whose keys share one fixed 4 KiB buffer). Output is written as each
 * batch is placed, in input order, so on a malformed line N the lines
 * before it are placed and written first; the error says so and no
 * statistics file is written. docs/shard.md is the contract.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "strata/shard.h"

static const char usage_text[] =
	"usage: strata shard --gpus N --spill-threshold T [--seed-load DEV:COST]...\n"
	"                    [--stats FILE]\n"
	"\n"
	"Reads one item per line from stdin, KEY<TAB>COST (KEY = the raw bytes\n"
	"before the last tab; COST a whole number; CRLF accepted), and writes\n"
	"KEY<TAB>DEVICE per item in input order, or KEY<TAB>- for cost 0.\n"
	"Each item goes to its home device (BLAKE3 of KEY modulo N) unless that\n"
	"device is loaded more than T above the least-loaded one; then it goes\n"
	"there (ties: lowest index).\n"
	"\n"
	"  --gpus N              devices to place on (1 to 16777216)\n"
	"  --spill-threshold T   load imbalance allowed before spilling\n"
	"  --seed-load DEV:COST  load already queued on device DEV (repeatable)\n"
	"  --stats FILE          write statistics as JSON to FILE on success\n";

static void help(FILE *f)
{
	fputs(usage_text, f);
}

typedef struct options {
	uint64_t gpus, threshold;
	bool have_gpus, have_threshold;
	const char *stats_path;
} options;

/* ------------------------------------------------------------------------ */

/* Matches "--name VALUE" and "--name=VALUE"; advances *i past the value. */
static bool option_value(int argc, char **argv, int *i, const char *name,
			 const char **value, int *rc)
{
	const char *a = argv[*i];
	size_t n = strlen(name);
	if (strncmp(a, name, n) != 0)
		return false;
	if (a[n] == '=') {
		*value = a + n + 1;
		return true;
	}
	if (a[n] != '\0')
		return false;
	if (*i + 1 >= argc) {
		*rc = strata_cli_usage("shard", "%s needs a value", name);
		return true;
	}
	*value = argv[++*i];
	return true;
}

static int parse_seed(const char *text, uint64_t gpus, uint32_t *device,
		      uint64_t *cost)
{
	strata_error e;
	char shown[64];
	strata_escape(shown, sizeof shown, text, strlen(text));
	const char *colon = strchr(text, ':');
	if (!colon)
		return strata_cli_usage("shard",
					"--seed-load '%s' is not DEV:COST", shown);
	char dev[32];
	size_t dl = (size_t)(colon - text);
	if (dl == 0 || dl >= sizeof dev)
		return strata_cli_usage("shard",
					"--seed-load '%s' has no device before ':'",
					shown);
	memcpy(dev, text, dl);
	dev[dl] = '\0';
	uint64_t d;
	if (strata_cli_parse_u64("--seed-load device", dev, &d, &e) != STRATA_OK ||
	    strata_cli_parse_u64("--seed-load cost", colon + 1, cost, &e) !=
		    STRATA_OK)
		return strata_cli_fail(&e);
	if (d >= gpus)
		return strata_cli_usage("shard",
					"--seed-load '%s': device %" PRIu64
					" is out of range for --gpus %" PRIu64
					" (devices 0 to %" PRIu64 ")",
					shown, d, gpus, gpus - 1);
	*device = (uint32_t)d;
	return STRATA_EXIT_OK;
}

/* First pass: everything but the seed loads, which need the allocator. */
static int parse_options(int argc, char **argv, options *o)
{
	strata_error e;
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		int rc = -1;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			help(stdout);
			return -2;
		}
		if (option_value(argc, argv, &i, "--gpus", &v, &rc)) {
			if (rc >= 0)
				return rc;
			if (o->have_gpus)
				return strata_cli_usage("shard", "--gpus given twice");
			if (strata_cli_parse_u64("--gpus", v, &o->gpus, &e) != STRATA_OK)
				return strata_cli_fail(&e);
			o->have_gpus = true;
		} else if (option_value(argc, argv, &i, "--spill-threshold", &v,
					&rc)) {
			if (rc >= 0)
				return rc;
			if (o->have_threshold)
				return strata_cli_usage("shard",
							"--spill-threshold given twice");
			if (strata_cli_parse_u64("--spill-threshold", v,
						 &o->threshold, &e) != STRATA_OK)
				return strata_cli_fail(&e);
			o->have_threshold = true;
		} else if (option_value(argc, argv, &i, "--seed-load", &v, &rc)) {
			if (rc >= 0)
				return rc;
		} else if (option_value(argc, argv, &i, "--stats", &v, &rc)) {
			if (rc >= 0)
				return rc;
			if (!*v)
				return strata_cli_usage("shard", "--stats needs a file name");
			o->stats_path = v;
			if ((rc = strata_cli_output("--stats", v)))
				return rc;
		} else {
			/* an option's name is what comes before any '=' */
			char shown[64];
			bool dash = argv[i][0] == '-' && argv[i][1];
			size_t k = dash ? strcspn(argv[i], "=") : strlen(argv[i]);
			strata_escape(shown, sizeof shown, argv[i], k);
			if (dash) /* did you mean, from the help text */
				return strata_cli_unknown_option("shard", shown,
								 help);
			return strata_cli_usage("shard", "unexpected argument '%s'",
						shown);
		}
	}
	if (!o->have_gpus)
		return strata_cli_usage("shard", "--gpus N is required");
	if (!o->have_threshold)
		return strata_cli_usage("shard", "--spill-threshold T is required");
	if (o->gpus == 0) {
		strata_shard_create(0, 0, NULL, &e); /* the library's own words */
		e.code = STRATA_E_USAGE;
		return strata_cli_fail(&e);
	}
	if (o->gpus > STRATA_SHARD_MAX_DEVICES)
		return strata_cli_usage("shard", "--gpus %" PRIu64
					" is more than the %u devices strata shards onto",
					o->gpus, STRATA_SHARD_MAX_DEVICES);
	return STRATA_EXIT_OK;
}

/* Second pass: apply --seed-load in command-line order. */
static int apply_seeds(int argc, char **argv, const options *o,
		       strata_shard *s)
{
	for (int i = 1; i < argc; i++) {
		const char *v = NULL;
		int rc = -1;
		if (!option_value(argc, argv, &i, "--seed-load", &v, &rc)) {
			/* skip the value of the other options */
			if (!strchr(argv[i], '=') && strcmp(argv[i], "--help"))
				i++;
			continue;
		}
		uint32_t d = 0;
		uint64_t cost = 0;
		if ((rc = parse_seed(v, o->gpus, &d, &cost)) != STRATA_EXIT_OK)
			return rc;
		strata_error e;
		if (strata_shard_seed_load(s, d, cost, &e) != STRATA_OK) {
			e.code = STRATA_E_USAGE;
			strata_error_set_fix(&e, "lower the --seed-load costs");
			return strata_cli_fail(&e);
		}
	}
	return STRATA_EXIT_OK;
}

/* ------------------------------------------------------------------------ */

static void put_device(uint32_t d, FILE *out)
{
	char b[12];
	int n = 0;
	do {
		b[n++] = (char)('0' + d % 10);
		d /= 10;
	} while (d);
	while (n)
		putc_unlocked(b[--n], out);
}

static int bad_line(strata_error *e, uint64_t line)
{
	fflush(stdout);
	size_t l = strlen(e->message);
	if (line > 2)
		snprintf(e->message + l, sizeof e->message - l,
			 " (lines 1 to %" PRIu64
			 " were already placed and written to stdout; no statistics were written)",
			 line - 1);
	else if (line == 2)
		snprintf(e->message + l, sizeof e->message - l,
			 " (line 1 was already placed and written to stdout; no statistics were written)");
	else
		snprintf(e->message + l, sizeof e->message - l,
			 " (nothing was written; no statistics were written)");
	return strata_cli_fail(e);
}

typedef struct counts {
	uint64_t lines, zero_cost;
} counts;

/* Lines are placed a batch at a time through strata_shard_assign_batch,
 * which hashes keys ahead of their placement (faster per line, and the
 * same devices as one call per line: bench/shard). Their keys are copied
 * into a fixed buffer so the line buffer can be reused; a key too long for
 * it is placed on its own, straight from the line. */
#define BATCH_LINES 32
#define BATCH_KEY_BYTES 4096

typedef struct pending {
	strata_shard_item item[BATCH_LINES];
	size_t count;
	uint64_t first_line; /* line number of item[0] */
	size_t key_bytes;    /* used of keys */
	char keys[BATCH_KEY_BYTES];
} pending;

static void write_item(const strata_shard_item *it, FILE *out, counts *c)
{
	fwrite_unlocked(it->key, 1, it->key_bytes, out);
	putc_unlocked('\t', out);
	if (it->device == STRATA_SHARD_NO_DEVICE) {
		c->zero_cost++;
		putc_unlocked('-', out);
	} else {
		put_device(it->device, out);
	}
	putc_unlocked('\n', out);
}

/* Places and writes the pending lines and empties the batch. If a line's
 * device load would overflow, the lines before it are written and the
 * error names it. */
static int place_pending(strata_shard *s, pending *p, FILE *out, counts *c)
{
	size_t placed = 0;
	strata_error e;
	strata_status st =
		strata_shard_assign_batch(s, p->item, p->count, &placed, &e);
	for (size_t i = 0; i < placed; i++)
		write_item(&p->item[i], out, c);
	uint64_t line = p->first_line + placed;
	p->count = 0;
	p->key_bytes = 0;
	if (st == STRATA_OK)
		return STRATA_EXIT_OK;
	if (e.code == STRATA_E_SHARD_LOAD_OVERFLOW)
		strata_error_prefix(&e, "line %" PRIu64, line);
	return bad_line(&e, line);
}

/* Adds a parsed line to the batch, placing the batch first when it is
 * full or the key does not fit, and a long key on its own. */
static int add_line(strata_shard *s, pending *p, const char *line,
		    size_t key, uint64_t cost, uint64_t number, FILE *out,
		    counts *c)
{
	int rc = STRATA_EXIT_OK;
	if (p->count == BATCH_LINES || key > BATCH_KEY_BYTES - p->key_bytes)
		rc = place_pending(s, p, out, c);
	if (rc != STRATA_EXIT_OK)
		return rc;
	if (p->count == 0)
		p->first_line = number;
	const char *copy = line;
	if (key <= BATCH_KEY_BYTES) {
		copy = memcpy(p->keys + p->key_bytes, line, key);
		p->key_bytes += key;
	}
	p->item[p->count++] =
		(strata_shard_item){.key = copy, .key_bytes = key, .cost = cost};
	/* The line buffer is reused by the next read. */
	return copy == line ? place_pending(s, p, out, c) : STRATA_EXIT_OK;
}

static int place_stream(strata_shard *s, FILE *in, FILE *out, counts *c)
{
	static pending p; /* 5 KiB: the whole batch state, reused */
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	strata_error e;
	int rc = STRATA_EXIT_OK;
	p.count = 0;
	p.key_bytes = 0;
	errno = 0;
	while ((n = getline(&line, &cap, in)) > 0) {
		size_t len = (size_t)n, key;
		uint64_t cost;
		c->lines++;
		if (line[len - 1] == '\n')
			len--;
		if (strata_shard_parse_line(line, len, c->lines, &key, &cost, &e) !=
		    STRATA_OK) {
			/* The lines before it are placed and written first. */
			rc = place_pending(s, &p, out, c);
			if (rc == STRATA_EXIT_OK)
				rc = bad_line(&e, c->lines);
			break;
		}
		rc = add_line(s, &p, line, key, cost, c->lines, out, c);
		if (rc != STRATA_EXIT_OK)
			break;
		errno = 0;
	}
	int read_errno = errno; /* before placing the last batch can change it */
	bool read_failed = ferror(in) || (n < 0 && errno == ENOMEM);
	if (rc == STRATA_EXIT_OK)
		rc = place_pending(s, &p, out, c);
	if (rc == STRATA_EXIT_OK && read_failed) {
		fflush(out);
		strata_fail(&e, read_errno == ENOMEM ? STRATA_E_NOMEM : STRATA_E_IO,
			    "check the input stream (a line too long for memory?)",
			    "reading stdin failed after line %" PRIu64 ": %s",
			    c->lines, strerror(read_errno));
		rc = strata_cli_fail(&e);
	}
	free(line); /* getline's buffer comes from the C library */
	if (rc == STRATA_EXIT_OK && (fflush(out) != 0 || ferror(out))) {
		strata_fail(&e, STRATA_E_IO, "check where stdout goes (disk full?)",
			    "writing stdout failed: %s", strerror(errno));
		rc = strata_cli_fail(&e);
	}
	return rc;
}

static void write_device(strata_json *j, const strata_shard *s, uint32_t d)
{
	strata_shard_device_stats ds;
	strata_shard_get_device_stats(s, d, &ds, NULL);
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "device", d);
	strata_json_kv_u64(j, "load", ds.load);
	strata_json_kv_u64(j, "seeded_load", ds.seeded_load);
	strata_json_kv_u64(j, "items", ds.items);
	strata_json_kv_u64(j, "spilled_in", ds.spilled_in);
	strata_json_kv_u64(j, "spilled_away", ds.spilled_away);
	strata_json_object_end(j);
}

/* The statistics document (docs/shard.md "Statistics"). */
static int write_stats(const char *path, const strata_shard *s,
		       const counts *c)
{
	strata_shard_stats st;
	strata_shard_get_stats(s, &st);
	strata_json j;
	strata_json_init(&j, true);
	strata_json_object_begin(&j);
	strata_json_kv_u64(&j, "schema_version", 1);
	strata_json_kv_u64(&j, "devices", st.device_count);
	strata_json_kv_u64(&j, "spill_threshold", st.spill_threshold);
	strata_json_kv_u64(&j, "lines", c->lines);
	strata_json_kv_u64(&j, "items", st.items);
	strata_json_kv_u64(&j, "zero_cost_items", c->zero_cost);
	strata_json_kv_u64(&j, "home_hits", st.home_hits);
	strata_json_kv_u64(&j, "spills", st.spills);
	strata_json_key(&j, "home_hit_rate");
	if (st.items)
		strata_json_double(&j, (double)st.home_hits / (double)st.items);
	else
		strata_json_null(&j); /* no items: no rate, not 0 or 1 */
	strata_json_kv_u64(&j, "largest_cost", st.largest_cost);
	strata_json_kv_u64(&j, "min_load", st.min_load);
	strata_json_kv_u64(&j, "max_load", st.max_load);
	strata_json_kv_u64(&j, "final_gap", st.max_load - st.min_load);
	strata_json_kv_u64(&j, "largest_gap", st.largest_gap);
	strata_json_key(&j, "per_device");
	strata_json_array_begin(&j);
	for (uint32_t d = 0; d < st.device_count; d++)
		write_device(&j, s, d);
	strata_json_array_end(&j);
	strata_json_object_end(&j);
	strata_error e;
	strata_status rc = strata_json_finish(&j, &e);
	if (rc == STRATA_OK)
		rc = strata_file_write_atomic(path, j.buf, j.len, &e);
	strata_json_fini(&j);
	if (rc != STRATA_OK) {
		strata_error_prefix(&e, "--stats");
		return strata_cli_fail(&e);
	}
	return STRATA_EXIT_OK;
}

/* ------------------------------------------------------------------------ */

int strata_cmd_shard(int argc, char **argv)
{
	options o = {0};
	int rc = parse_options(argc, argv, &o);
	if (rc == -2)
		return STRATA_EXIT_OK; /* --help */
	if (rc != STRATA_EXIT_OK)
		return rc;
	strata_shard *s = NULL;
	strata_error e;
	if (strata_shard_create((uint32_t)o.gpus, o.threshold, &s, &e) !=
	    STRATA_OK)
		return strata_cli_fail(&e);
	rc = apply_seeds(argc, argv, &o, s);
	counts c = {0};
	if (rc == STRATA_EXIT_OK) {
		static char outbuf[1 << 16];
		setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
		rc = place_stream(s, stdin, stdout, &c);
	}
	if (rc == STRATA_EXIT_OK && o.stats_path)
		rc = write_stats(o.stats_path, s, &c);
	strata_shard_destroy(s);
	return rc;
}
