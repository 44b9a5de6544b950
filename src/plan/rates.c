/* rates.c - the rates file `strata calibrate` writes and plans read: where
 * it lives (XDG cache directory), its JSON schema, and how its rates fill
 * a plan's options (layer: plan).
 *
 * Trust: the file is this tool's own output, but it is read as any input:
 * every key is checked for its type and range, and anything else is an
 * error naming the key, never a guess. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "strata/plan.h"

#define RATES_SCHEMA 1
#define RATES_MAX_BYTES (1u << 20)

/* ------------------------------------------------------------------------ */
/* Where                                                                    */
/* ------------------------------------------------------------------------ */

strata_status strata_plan_rates_path(char *buf, size_t cap, strata_error *err)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	int n;
	if (xdg && xdg[0] == '/') /* the spec ignores a relative one */
		n = snprintf(buf, cap, "%s/strata/rates.json", xdg);
	else if (home && home[0])
		n = snprintf(buf, cap, "%s/.cache/strata/rates.json", home);
	else
		return strata_fail(err, STRATA_E_INVALID_ARG,
				   "set XDG_CACHE_HOME or HOME",
				   "no cache directory for the rates file: neither XDG_CACHE_HOME nor HOME is set");
	if (n < 0 || (size_t)n >= cap)
		return strata_fail(err, STRATA_E_OVERFLOW,
				   "use a shorter XDG_CACHE_HOME or HOME",
				   "the rates file's path is longer than %zu bytes",
				   cap);
	return STRATA_OK;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                  */
/* ------------------------------------------------------------------------ */

static strata_status bad(const char *path, const char *key, strata_error *err)
{
	return strata_fail(err, STRATA_E_PARSE,
			   "run strata calibrate again (it rewrites the file), or delete it",
			   "rates file %.200s: '%s' is missing or not a positive number",
			   path, key);
}

/* A positive finite number at key of o into *out; absent is 0 only when
 * optional. */
static strata_status number(json_t *o, const char *key, bool optional,
			    double *out, const char *path, strata_error *err)
{
	json_t *v = json_object_get(o, key);
	if (!v && optional) {
		*out = 0;
		return STRATA_OK;
	}
	double d = json_is_number(v) ? json_number_value(v) : -1;
	if (!(d > 0) || d > 1e18)
		return bad(path, key, err);
	*out = d;
	return STRATA_OK;
}

/* The optional "types" object of a processor: {"Q8_0": {"gemv_bytes_per_second",
 * "gemm_flops", "layer_bytes_per_second" (the CPU's), "layer_fixed_seconds",
 * "row_fixed_seconds"}, ...}; a name strata does not know is skipped (a later
 * strata's type), a known one must hold positive numbers. The fixed
 * costs are optional (an earlier strata wrote none: the plan takes its
 * defaults, docs/plan.md "Rates"). */
static strata_status read_types(json_t *o, strata_plan_type_rate *out,
				double *layer, const char *path,
				strata_error *err)
{
	json_t *types = json_object_get(o, "types");
	if (!types)
		return STRATA_OK;
	if (!json_is_object(types))
		return bad(path, "types", err);
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		json_t *e = json_object_get(types, strata_block_name(
							   (strata_block_type)t));
		if (!e)
			continue;
		if (!json_is_object(e))
			return bad(path, "types.TYPE", err);
		strata_status s = number(e, "gemv_bytes_per_second", true,
					 &out[t].gemv, path, err);
		if (s == STRATA_OK)
			s = number(e, "gemm_flops", true, &out[t].gemm, path,
				   err);
		if (s == STRATA_OK && layer)
			s = number(e, "layer_bytes_per_second", true,
				   &layer[t], path, err);
		if (s == STRATA_OK)
			s = number(e, "layer_fixed_seconds", true,
				   &out[t].layer_seconds, path, err);
		if (s == STRATA_OK)
			s = number(e, "row_fixed_seconds", true,
				   &out[t].row_seconds, path, err);
		if (s != STRATA_OK)
			return s;
	}
	return STRATA_OK;
}

static strata_status read_device(json_t *e, strata_plan_device_rates *d,
				 const char *path, strata_error *err)
{
	json_t *name = json_object_get(e, "device");
	if (!json_is_string(name) || json_string_length(name) == 0 ||
	    json_string_length(name) >= sizeof d->name)
		return bad(path, "devices[].device", err);
	snprintf(d->name, sizeof d->name, "%s", json_string_value(name));
	strata_status s = number(e, "h2d_bytes_per_second", false, &d->h2d,
				 path, err);
	if (s == STRATA_OK)
		s = number(e, "d2h_bytes_per_second", false, &d->d2h, path, err);
	if (s == STRATA_OK)
		s = number(e, "memory_bytes_per_second", false, &d->memory,
			   path, err);
	if (s == STRATA_OK)
		s = number(e, "device_flops", false, &d->flops, path, err);
	if (s == STRATA_OK)
		s = number(e, "launch_seconds", true, &d->launch_seconds, path,
			   err);
	if (s == STRATA_OK)
		s = number(e, "crossing_seconds", true, &d->crossing_seconds,
			   path, err);
	if (s == STRATA_OK)
		s = number(e, "h2d_shared_bytes_per_second", true,
			   &d->h2d_shared, path, err);
	if (s == STRATA_OK)
		s = number(e, "host_memory_shared_bytes_per_second", true,
			   &d->host_memory_shared, path, err);
	if (s == STRATA_OK)
		s = read_types(e, d->types, NULL, path, err);
	return s;
}

static strata_status read_doc(json_t *doc, strata_plan_rates *r,
			      const char *path, strata_error *err)
{
	json_t *v = json_object_get(doc, "schema_version");
	if (!json_is_integer(v) || json_integer_value(v) != RATES_SCHEMA)
		return bad(path, "schema_version", err);
	json_t *host = json_object_get(doc, "host");
	if (!json_is_object(host))
		return bad(path, "host", err);
	strata_status s = number(host, "host_memory_bytes_per_second", false,
				 &r->host_memory, path, err);
	if (s == STRATA_OK)
		s = number(host, "cpu_flops", false, &r->cpu_flops, path, err);
	json_t *t = json_object_get(host, "threads");
	if (s == STRATA_OK && (!json_is_integer(t) || json_integer_value(t) < 1 ||
			       json_integer_value(t) > 65536))
		return bad(path, "host.threads", err);
	if (s == STRATA_OK)
		s = number(host, "launch_seconds", true, &r->cpu_launch_seconds,
			   path, err);
	if (s == STRATA_OK)
		s = read_types(host, r->cpu_types, r->cpu_layer, path, err);
	json_t *rows = json_object_get(host, "gemm_rows");
	if (s == STRATA_OK && rows &&
	    (!json_is_integer(rows) || json_integer_value(rows) < 1 ||
	     json_integer_value(rows) > 1 << 20))
		return bad(path, "host.gemm_rows", err);
	if (s != STRATA_OK)
		return s;
	r->gemm_rows = rows ? (uint32_t)json_integer_value(rows) : 0;
	r->threads = (uint32_t)json_integer_value(t);
	json_t *devs = json_object_get(doc, "devices");
	if (!json_is_array(devs) || json_array_size(devs) > STRATA_PLAN_MAX_DEVICES)
		return bad(path, "devices", err);
	r->device_count = (uint32_t)json_array_size(devs);
	for (uint32_t i = 0; s == STRATA_OK && i < r->device_count; i++)
		s = read_device(json_array_get(devs, i), &r->devices[i], path,
				err);
	return s;
}

strata_status strata_plan_rates_load(const char *path, strata_plan_rates *out,
				     bool *found, strata_error *err)
{
	char *text = NULL;
	size_t len = 0;
	*found = false;
	strata_status s = strata_file_read_all(path, RATES_MAX_BYTES, &text,
					       &len, err);
	if (s != STRATA_OK) {
		struct stat st;
		*found = stat(path, &st) == 0;
		return s;
	}
	*found = true;
	json_error_t je;
	json_t *doc = json_loadb(text, len, 0, &je);
	strata_free(text);
	if (!json_is_object(doc)) {
		json_decref(doc);
		return strata_fail(err, STRATA_E_PARSE,
				   "run strata calibrate again (it rewrites the file), or delete it",
				   "rates file %.200s is not a JSON object", path);
	}
	strata_plan_rates r;
	memset(&r, 0, sizeof r);
	s = read_doc(doc, &r, path, err);
	json_decref(doc);
	if (s == STRATA_OK)
		*out = r;
	return s;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                  */
/* ------------------------------------------------------------------------ */

/* mkdir of the file's folder and of the folder above it. */
static strata_status make_dirs(const char *path, strata_error *err)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return STRATA_OK;
	*slash = '\0';
	char *up = strrchr(dir, '/');
	if (up && up != dir) {
		*up = '\0';
		if (mkdir(dir, 0755) != 0 && errno != EEXIST)
			return strata_fail(err, STRATA_E_IO,
					   "create the cache directory, or set XDG_CACHE_HOME",
					   "cannot create %.200s: %s", dir,
					   strerror(errno));
		*up = '/';
	}
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return strata_fail(err, STRATA_E_IO,
				   "create the cache directory, or set XDG_CACHE_HOME",
				   "cannot create %.200s: %s", dir, strerror(errno));
	return STRATA_OK;
}

static void write_types(strata_json *j, const strata_plan_type_rate *t,
			const double *layer)
{
	bool any = false;
	for (int k = 0; k < STRATA_BLOCK_COUNT; k++)
		any |= t[k].gemv > 0 || t[k].gemm > 0;
	if (!any)
		return;
	strata_json_key(j, "types");
	strata_json_object_begin(j);
	for (int k = 0; k < STRATA_BLOCK_COUNT; k++) {
		if (!(t[k].gemv > 0) && !(t[k].gemm > 0))
			continue;
		strata_json_key(j, strata_block_name((strata_block_type)k));
		strata_json_object_begin(j);
		if (t[k].gemv > 0)
			strata_json_kv_double(j, "gemv_bytes_per_second",
					      t[k].gemv);
		if (t[k].gemm > 0)
			strata_json_kv_double(j, "gemm_flops", t[k].gemm);
		if (layer && layer[k] > 0)
			strata_json_kv_double(j, "layer_bytes_per_second",
					      layer[k]);
		if (t[k].layer_seconds > 0)
			strata_json_kv_double(j, "layer_fixed_seconds",
					      t[k].layer_seconds);
		if (t[k].row_seconds > 0)
			strata_json_kv_double(j, "row_fixed_seconds",
					      t[k].row_seconds);
		strata_json_object_end(j);
	}
	strata_json_object_end(j);
}

strata_status strata_plan_rates_save(const char *path,
				     const strata_plan_rates *r,
				     strata_error *err)
{
	strata_json j;
	strata_json_init(&j, true);
	strata_json_object_begin(&j);
	strata_json_kv_u64(&j, "schema_version", RATES_SCHEMA);
	strata_json_key(&j, "host");
	strata_json_object_begin(&j);
	strata_json_kv_double(&j, "host_memory_bytes_per_second", r->host_memory);
	strata_json_kv_double(&j, "cpu_flops", r->cpu_flops);
	strata_json_kv_u64(&j, "threads", r->threads);
	if (r->gemm_rows)
		strata_json_kv_u64(&j, "gemm_rows", r->gemm_rows);
	if (r->cpu_launch_seconds > 0)
		strata_json_kv_double(&j, "launch_seconds",
				      r->cpu_launch_seconds);
	write_types(&j, r->cpu_types, r->cpu_layer);
	strata_json_object_end(&j);
	strata_json_key(&j, "devices");
	strata_json_array_begin(&j);
	for (uint32_t i = 0; i < r->device_count; i++) {
		const strata_plan_device_rates *d = &r->devices[i];
		strata_json_object_begin(&j);
		strata_json_kv_string(&j, "device", d->name);
		strata_json_kv_double(&j, "h2d_bytes_per_second", d->h2d);
		strata_json_kv_double(&j, "d2h_bytes_per_second", d->d2h);
		strata_json_kv_double(&j, "memory_bytes_per_second", d->memory);
		strata_json_kv_double(&j, "device_flops", d->flops);
		if (d->launch_seconds > 0)
			strata_json_kv_double(&j, "launch_seconds",
					      d->launch_seconds);
		if (d->crossing_seconds > 0)
			strata_json_kv_double(&j, "crossing_seconds",
					      d->crossing_seconds);
		if (d->h2d_shared > 0 && d->host_memory_shared > 0) {
			strata_json_kv_double(&j, "h2d_shared_bytes_per_second",
					      d->h2d_shared);
			strata_json_kv_double(
				&j, "host_memory_shared_bytes_per_second",
				d->host_memory_shared);
		}
		write_types(&j, d->types, NULL);
		strata_json_object_end(&j);
	}
	strata_json_array_end(&j);
	strata_json_object_end(&j);
	strata_status s = strata_json_finish(&j, err);
	if (s == STRATA_OK)
		s = make_dirs(path, err);
	if (s == STRATA_OK)
		s = strata_file_write_atomic(path, j.buf, j.len, err);
	strata_json_fini(&j);
	return s;
}

/* ------------------------------------------------------------------------ */
/* Applying                                                                 */
/* ------------------------------------------------------------------------ */

static void take(double *field, double value, strata_plan_rate r,
		 strata_plan_options *o)
{
	if (*field > 0 || !(value > 0))
		return; /* an option's rate stays; nothing measured */
	*field = value;
	o->calibrated_rates |= 1u << r;
}

/* Per-type rates the options do not have yet, marked in *bits. */
static void take_types(strata_plan_type_rate *into,
		       const strata_plan_type_rate *from, uint32_t *bits)
{
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++) {
		if (into[t].gemv > 0 || into[t].gemm > 0 ||
		    !(from[t].gemv > 0 || from[t].gemm > 0))
			continue;
		into[t] = from[t];
		*bits |= 1u << t;
	}
}

void strata_plan_rates_apply(const strata_plan_rates *r, uint32_t index,
			     strata_plan_options *o)
{
	take(&o->host_memory_bandwidth, r->host_memory,
	     STRATA_PLAN_RATE_HOST_MEMORY, o);
	take(&o->cpu_flops, r->cpu_flops, STRATA_PLAN_RATE_CPU_FLOPS, o);
	take(&o->cpu_launch_seconds, r->cpu_launch_seconds,
	     STRATA_PLAN_RATE_CPU_LAUNCH, o);
	take_types(o->cpu_types, r->cpu_types, &o->calibrated_cpu_types);
	for (int t = 0; t < STRATA_BLOCK_COUNT; t++)
		if (!(o->cpu_layer[t] > 0))
			o->cpu_layer[t] = r->cpu_layer[t];
	if (o->device == STRATA_PLAN_DEVICE_CPU) {
		/* the cpu device is the host: its memory and products */
		take(&o->memory_bandwidth, r->host_memory,
		     STRATA_PLAN_RATE_MEMORY, o);
		take(&o->device_flops, r->cpu_flops,
		     STRATA_PLAN_RATE_DEVICE_FLOPS, o);
		take(&o->device_launch_seconds, r->cpu_launch_seconds,
		     STRATA_PLAN_RATE_DEVICE_LAUNCH, o);
		take_types(o->device_types, r->cpu_types,
			   &o->calibrated_device_types);
		return;
	}
	char want[16];
	snprintf(want, sizeof want, "cuda:%u", index);
	for (uint32_t i = 0; i < r->device_count; i++) {
		const strata_plan_device_rates *d = &r->devices[i];
		if (strcmp(d->name, want))
			continue;
		take(&o->h2d_bandwidth, d->h2d, STRATA_PLAN_RATE_H2D, o);
		take(&o->d2h_bandwidth, d->d2h, STRATA_PLAN_RATE_D2H, o);
		take(&o->memory_bandwidth, d->memory, STRATA_PLAN_RATE_MEMORY, o);
		take(&o->device_flops, d->flops, STRATA_PLAN_RATE_DEVICE_FLOPS, o);
		take(&o->device_launch_seconds, d->launch_seconds,
		     STRATA_PLAN_RATE_DEVICE_LAUNCH, o);
		take(&o->crossing_seconds, d->crossing_seconds,
		     STRATA_PLAN_RATE_CROSSING, o);
		take(&o->h2d_shared_bandwidth, d->h2d_shared,
		     STRATA_PLAN_RATE_H2D_SHARED, o);
		take(&o->host_memory_shared_bandwidth, d->host_memory_shared,
		     STRATA_PLAN_RATE_HOST_MEMORY_SHARED, o);
		take_types(o->device_types, d->types,
			   &o->calibrated_device_types);
	}
}
