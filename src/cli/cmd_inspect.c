/* cmd_inspect.c - `strata inspect MODEL [--json] [--tensors]`: what a
 * checkpoint holds, from its headers alone: format, architecture, tensor
 * count, bytes per dtype, groups of execution units and static tensors
 * (layer: cli). The JSON form is documented in docs/inspect.md. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "strata/checkpoint.h"
#include "strata/model.h"
#include "strata/topology.h"

/* One execution-unit group: its units' byte sums, by unit index. */
typedef struct unit_row {
	const char *group;
	size_t group_len;
	uint64_t unit, bytes;
} unit_row;

typedef struct group_sum {
	const char *name;
	size_t name_len;
	uint64_t units, bytes, largest_unit, largest_bytes, tensors;
} group_sum;

typedef struct summary {
	uint64_t dtype_bytes[STRATA_DTYPE_COUNT];
	uint64_t dtype_count[STRATA_DTYPE_COUNT];
	uint64_t total;
	group_sum *groups;
	size_t group_count;
	size_t *statics; /* tensor indices */
	size_t static_count;
	uint64_t static_bytes;
	const char *check; /* "ok", or "skipped: ..." */
	char check_text[STRATA_ERROR_MESSAGE_BYTES + 16];
} summary;

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata inspect MODEL [--json] [--tensors]\n\n"
		"Describes MODEL (a directory with config.json and safetensors\n"
		"files, or a .gguf file) from its headers alone: format,\n"
		"architecture, tensor count, bytes per dtype, groups of execution\n"
		"units with the largest unit, and static tensors. No weights are\n"
		"read.\n\n"
		"options:\n"
		"  --json     one JSON object (docs/inspect.md)\n"
		"  --tensors  also list every tensor: name, dtype, shape, bytes, file\n");
}

/* ------------------------------------------------------------------------ */
/* Summing                                                                  */
/* ------------------------------------------------------------------------ */

static int by_group_unit(const void *a, const void *b)
{
	const unit_row *x = a, *y = b;
	size_t n = x->group_len < y->group_len ? x->group_len : y->group_len;
	int c = memcmp(x->group, y->group, n);
	if (c || x->group_len != y->group_len)
		return c ? c : (x->group_len < y->group_len ? -1 : 1);
	return x->unit < y->unit ? -1 : x->unit > y->unit;
}

/* Folds sorted rows into groups: units = distinct indices. */
static strata_status fold_groups(summary *s, unit_row *rows, size_t n,
				 strata_error *err)
{
	qsort(rows, n, sizeof *rows, by_group_unit);
	s->groups = strata_calloc_or_error(n ? n : 1, sizeof *s->groups,
					   "inspect groups", err);
	if (!s->groups)
		return STRATA_E_NOMEM;
	for (size_t i = 0; i < n;) {
		group_sum *g = &s->groups[s->group_count++];
		*g = (group_sum){.name = rows[i].group, .name_len = rows[i].group_len};
		while (i < n && rows[i].group_len == g->name_len &&
		       !memcmp(rows[i].group, g->name, g->name_len)) {
			uint64_t unit = rows[i].unit, bytes = 0;
			for (; i < n && rows[i].unit == unit &&
			       rows[i].group_len == g->name_len &&
			       !memcmp(rows[i].group, g->name, g->name_len); i++) {
				bytes += rows[i].bytes;
				g->tensors++;
			}
			g->units++;
			g->bytes += bytes;
			if (bytes > g->largest_bytes || g->units == 1) {
				g->largest_bytes = bytes;
				g->largest_unit = unit;
			}
		}
	}
	return STRATA_OK;
}

static strata_status summarise(const strata_catalog *c, summary *s,
			       strata_error *err)
{
	size_t n = strata_catalog_count(c);
	unit_row *rows = strata_calloc_or_error(n ? n : 1, sizeof *rows,
						"inspect units", err);
	s->statics = rows ? strata_calloc(n ? n : 1, sizeof *s->statics) : NULL;
	if (!s->statics) {
		strata_free(rows);
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "out of memory summarising %zu tensors", n);
	}
	size_t nrows = 0;
	strata_status st = STRATA_OK;
	for (size_t i = 0; i < n && !st; i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		s->dtype_bytes[t->dtype] += t->bytes;
		s->dtype_count[t->dtype]++;
		s->total += t->bytes;
		strata_owner o;
		st = strata_topology_owner(t->name, &o, err);
		if (st)
			break;
		if (o.kind == STRATA_OWNER_UNIT) {
			rows[nrows++] = (unit_row){o.group, o.group_len, o.unit,
						   t->bytes};
		} else {
			s->statics[s->static_count++] = i;
			s->static_bytes += t->bytes;
		}
	}
	if (!st)
		st = fold_groups(s, rows, nrows, err);
	strata_free(rows);
	return st;
}

static void summary_fini(summary *s)
{
	strata_free(s->groups);
	strata_free(s->statics);
}

static const char *static_role(const char *name, char *buf, size_t cap)
{
	strata_owner o;
	strata_error e;
	if (strata_topology_owner(name, &o, &e) || o.kind != STRATA_OWNER_STATIC)
		return "";
	snprintf(buf, cap, "%.*s", (int)o.role_len, o.role);
	return buf;
}

/* ------------------------------------------------------------------------ */
/* Text                                                                     */
/* ------------------------------------------------------------------------ */

static const char *file_name(const strata_catalog *c, uint32_t f)
{
	const char *p = strata_catalog_file_at(c, f)->path;
	const char *slash = strrchr(p, '/');
	return slash ? slash + 1 : p;
}

static void print_shape(FILE *out, const strata_tensor *t)
{
	fputc('[', out);
	for (uint32_t d = 0; d < t->n_dims; d++)
		fprintf(out, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
	fputc(']', out);
}

static void print_arch(FILE *out, const strata_model_desc *d)
{
	fprintf(out, "architecture: %s (family %s)\n", d->architecture,
		strata_family_name(d->family));
	if (!d->hidden)
		return;
	fprintf(out,
		"  hidden %" PRIu64 ", intermediate %" PRIu64 ", layers %" PRIu64
		", heads %" PRIu64 ", kv heads %" PRIu64 ", head dim %" PRIu64
		", vocab %" PRIu64 "\n",
		d->hidden, d->intermediate, d->layers, d->heads, d->kv_heads,
		d->head_dim, d->vocab);
	fprintf(out, "  max positions %" PRIu64 ", rms eps %g, rope theta %g",
		d->max_positions, d->rms_eps, d->rope_theta);
	if (d->rope_scaling.type[0] && d->rope_scaling.kind != STRATA_ROPE_DEFAULT)
		fprintf(out, ", rope scaling %s (factor %g, low %g, high %g, original %" PRIu64 ")",
			d->rope_scaling.type, d->rope_scaling.factor,
			d->rope_scaling.low_freq_factor,
			d->rope_scaling.high_freq_factor,
			d->rope_scaling.original_max_position_embeddings);
	fprintf(out, "\n  tied embeddings %s, attention bias %s, sliding window ",
		d->tied_embeddings ? "yes" : "no",
		d->attention_bias ? "yes" : "no");
	if (d->sliding_window)
		fprintf(out, "%" PRIu64, d->sliding_window);
	else
		fprintf(out, "none");
	fprintf(out, ", dtype %s\n", d->dtype[0] ? d->dtype : "-");
}

static void print_text(FILE *out, const char *model, const strata_catalog *c,
		       const strata_model_desc *d, const summary *s,
		       bool tensors)
{
	char a[32], b[32];
	fprintf(out, "model: %s\n", model);
	const strata_gguf *g = strata_catalog_gguf(c);
	if (g)
		fprintf(out, "format: gguf v%" PRIu32 "\n", strata_gguf_version(g));
	else
		fprintf(out, "format: safetensors (%zu file%s)\n",
			strata_catalog_file_count(c),
			strata_catalog_file_count(c) == 1 ? "" : "s");
	print_arch(out, d);
	fprintf(out, "tensor check: %s\n", s->check);
	fprintf(out, "tensors: %zu\nbytes per dtype:\n", strata_catalog_count(c));
	for (int t = 0; t < STRATA_DTYPE_COUNT; t++)
		if (s->dtype_count[t])
			fprintf(out, "  %-8s %6" PRIu64 " tensors %14" PRIu64 " bytes (%s)\n",
				strata_dtype_get((strata_dtype)t)->name,
				s->dtype_count[t], s->dtype_bytes[t],
				strata_size_format(s->dtype_bytes[t], a, sizeof a));
	fprintf(out, "total: %" PRIu64 " bytes (%s)\ngroups:\n", s->total,
		strata_size_format(s->total, a, sizeof a));
	if (!s->group_count)
		fprintf(out, "  (none)\n");
	for (size_t i = 0; i < s->group_count; i++) {
		const group_sum *gs = &s->groups[i];
		fprintf(out, "  %.*s: %" PRIu64 " units, %" PRIu64 " bytes (%s); largest unit %" PRIu64
			": %" PRIu64 " bytes (%s)\n",
			(int)gs->name_len, gs->name, gs->units, gs->bytes,
			strata_size_format(gs->bytes, a, sizeof a),
			gs->largest_unit, gs->largest_bytes,
			strata_size_format(gs->largest_bytes, b, sizeof b));
	}
	fprintf(out, "static tensors: %zu, %" PRIu64 " bytes (%s)\n",
		s->static_count, s->static_bytes,
		strata_size_format(s->static_bytes, a, sizeof a));
	for (size_t i = 0; i < s->static_count; i++) {
		const strata_tensor *t = strata_catalog_tensor(c, s->statics[i]);
		char role[160], name[1100];
		strata_escape(name, sizeof name, t->name, strlen(t->name));
		fprintf(out, "  %-40s %-10s %" PRIu64 " bytes\n", name,
			static_role(t->name, role, sizeof role), t->bytes);
	}
	if (!tensors)
		return;
	fprintf(out, "tensor list (shape in the file's own order):\n");
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		char name[1100];
		strata_escape(name, sizeof name, t->name, strlen(t->name));
		fprintf(out, "  %s %s ", name, strata_dtype_get(t->dtype)->name);
		print_shape(out, t);
		fprintf(out, " %" PRIu64 " %s\n", t->bytes, file_name(c, t->file));
	}
}

/* ------------------------------------------------------------------------ */
/* JSON (docs/inspect.md)                                                   */
/* ------------------------------------------------------------------------ */

static void json_arch(strata_json *j, const strata_model_desc *d)
{
	strata_json_key(j, "architecture");
	strata_json_object_begin(j);
	strata_json_kv_string(j, "name", d->architecture);
	strata_json_kv_string(j, "family", strata_family_name(d->family));
	strata_json_kv_string(j, "source", d->source == STRATA_FORMAT_GGUF
						   ? "gguf_metadata"
						   : "config.json");
	strata_json_kv_u64(j, "hidden_size", d->hidden);
	strata_json_kv_u64(j, "intermediate_size", d->intermediate);
	strata_json_kv_u64(j, "layers", d->layers);
	strata_json_kv_u64(j, "heads", d->heads);
	strata_json_kv_u64(j, "kv_heads", d->kv_heads);
	strata_json_kv_u64(j, "head_dim", d->head_dim);
	strata_json_kv_u64(j, "vocab_size", d->vocab);
	strata_json_kv_u64(j, "max_positions", d->max_positions);
	strata_json_kv_double(j, "rms_eps", d->rms_eps);
	strata_json_kv_double(j, "rope_theta", d->rope_theta);
	strata_json_key(j, "rope_scaling");
	if (d->rope_scaling.type[0] && d->rope_scaling.kind != STRATA_ROPE_DEFAULT) {
		strata_json_object_begin(j);
		strata_json_kv_string(j, "type", d->rope_scaling.type);
		strata_json_kv_double(j, "factor", d->rope_scaling.factor);
		strata_json_kv_double(j, "low_freq_factor", d->rope_scaling.low_freq_factor);
		strata_json_kv_double(j, "high_freq_factor", d->rope_scaling.high_freq_factor);
		strata_json_kv_u64(j, "original_max_position_embeddings",
				   d->rope_scaling.original_max_position_embeddings);
		strata_json_object_end(j);
	} else {
		strata_json_null(j);
	}
	strata_json_kv_bool(j, "tied_embeddings", d->tied_embeddings);
	strata_json_kv_bool(j, "attention_bias", d->attention_bias);
	strata_json_kv_u64(j, "sliding_window", d->sliding_window);
	strata_json_kv_string(j, "dtype", d->dtype);
	strata_json_object_end(j);
}

static void json_groups(strata_json *j, const strata_catalog *c,
			const summary *s)
{
	strata_json_key(j, "groups");
	strata_json_array_begin(j);
	for (size_t i = 0; i < s->group_count; i++) {
		const group_sum *g = &s->groups[i];
		strata_json_object_begin(j);
		strata_json_key(j, "name");
		strata_json_string_n(j, g->name, g->name_len);
		strata_json_kv_u64(j, "units", g->units);
		strata_json_kv_u64(j, "tensors", g->tensors);
		strata_json_kv_u64(j, "bytes", g->bytes);
		strata_json_kv_u64(j, "largest_unit", g->largest_unit);
		strata_json_kv_u64(j, "largest_unit_bytes", g->largest_bytes);
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
	strata_json_key(j, "static");
	strata_json_object_begin(j);
	strata_json_kv_u64(j, "count", s->static_count);
	strata_json_kv_u64(j, "bytes", s->static_bytes);
	strata_json_key(j, "tensors");
	strata_json_array_begin(j);
	for (size_t i = 0; i < s->static_count; i++) {
		const strata_tensor *t = strata_catalog_tensor(c, s->statics[i]);
		char role[160];
		strata_json_object_begin(j);
		strata_json_kv_string(j, "name", t->name);
		strata_json_kv_string(j, "role", static_role(t->name, role, sizeof role));
		strata_json_kv_u64(j, "bytes", t->bytes);
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
	strata_json_object_end(j);
}

static void json_tensors(strata_json *j, const strata_catalog *c)
{
	strata_json_key(j, "tensors");
	strata_json_array_begin(j);
	for (size_t i = 0; i < strata_catalog_count(c); i++) {
		const strata_tensor *t = strata_catalog_tensor(c, i);
		strata_json_object_begin(j);
		strata_json_kv_string(j, "name", t->name);
		strata_json_kv_string(j, "dtype", strata_dtype_get(t->dtype)->name);
		strata_json_key(j, "shape");
		strata_json_array_begin(j);
		for (uint32_t d = 0; d < t->n_dims; d++)
			strata_json_u64(j, t->shape[d]);
		strata_json_array_end(j);
		strata_json_kv_u64(j, "bytes", t->bytes);
		strata_json_kv_string(j, "file", file_name(c, t->file));
		strata_json_kv_u64(j, "offset", t->offset);
		strata_json_object_end(j);
	}
	strata_json_array_end(j);
}

static strata_status print_json(FILE *out, const char *model,
				const strata_catalog *c,
				const strata_model_desc *d, const summary *s,
				bool tensors, strata_error *err)
{
	strata_json j;
	strata_json_init(&j, true);
	strata_json_object_begin(&j);
	strata_json_kv_string(&j, "model", model);
	const strata_gguf *g = strata_catalog_gguf(c);
	strata_json_kv_string(&j, "format", g ? "gguf" : "safetensors");
	if (g)
		strata_json_kv_u64(&j, "gguf_version", strata_gguf_version(g));
	strata_json_key(&j, "files");
	strata_json_array_begin(&j);
	for (size_t i = 0; i < strata_catalog_file_count(c); i++) {
		const strata_catalog_file *f = strata_catalog_file_at(c, i);
		strata_json_object_begin(&j);
		strata_json_kv_string(&j, "path", f->path);
		strata_json_kv_u64(&j, "bytes", f->size);
		strata_json_kv_u64(&j, "data_offset", f->data_offset);
		strata_json_object_end(&j);
	}
	strata_json_array_end(&j);
	json_arch(&j, d);
	strata_json_kv_string(&j, "tensor_check", s->check);
	strata_json_kv_u64(&j, "tensor_count", strata_catalog_count(c));
	strata_json_key(&j, "bytes_per_dtype");
	strata_json_object_begin(&j);
	for (int t = 0; t < STRATA_DTYPE_COUNT; t++)
		if (s->dtype_count[t])
			strata_json_kv_u64(&j, strata_dtype_get((strata_dtype)t)->name,
					   s->dtype_bytes[t]);
	strata_json_object_end(&j);
	strata_json_kv_u64(&j, "total_bytes", s->total);
	json_groups(&j, c, s);
	if (tensors)
		json_tensors(&j, c);
	strata_json_object_end(&j);
	strata_status st = strata_json_finish(&j, err);
	if (!st)
		fwrite(j.buf, 1, j.len, out);
	strata_json_fini(&j);
	return st;
}

/* ------------------------------------------------------------------------ */

int strata_cmd_inspect(int argc, char **argv)
{
	const char *model = NULL;
	bool json = false, tensors = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			help(stdout);
			return STRATA_EXIT_OK;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--tensors")) {
			tensors = true;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return strata_cli_unknown_option("inspect", argv[i], help);
		} else if (model) {
			return strata_cli_usage("inspect", "more than one MODEL given");
		} else {
			model = argv[i];
		}
	}
	if (!model)
		return strata_cli_usage("inspect", "MODEL is missing");
	strata_error err;
	strata_catalog *c = NULL;
	strata_model_desc d;
	summary s = {0};
	strata_status st = strata_catalog_open(model, &c, &err);
	if (!st)
		st = strata_model_describe(model, c, &d, &err);
	if (!st && d.family == STRATA_FAMILY_UNKNOWN) {
		snprintf(s.check_text, sizeof s.check_text,
			 "skipped: architecture '%s' is not one strata checks",
			 d.architecture);
		s.check = s.check_text;
	} else if (!st) {
		st = strata_model_check_tensors(&d, c, &err);
		s.check = "ok";
	}
	if (!st)
		st = summarise(c, &s, &err);
	if (!st && json)
		st = print_json(stdout, model, c, &d, &s, tensors, &err);
	else if (!st)
		print_text(stdout, model, c, &d, &s, tensors);
	summary_fini(&s);
	strata_catalog_destroy(c);
	return st ? strata_cli_fail(&err) : STRATA_EXIT_OK;
}
