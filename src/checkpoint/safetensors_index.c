/* safetensors_index.c - a model directory: model.safetensors alone, or the
 * shards model.safetensors.index.json lists, checked against each other
 * (layer: checkpoint).
 *
 * Trust: the index is hostile. Shard names must be plain file names (no
 * path separators, so an index cannot reach outside its directory); every
 * listed shard must exist; every tensor the index lists must be in the shard
 * it names; a tensor in two shards, or in a shard but not in the index, is
 * an error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "checkpoint/readers.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define MAX_INDEX_BYTES (256ull * 1024 * 1024)
#define FIX_INDEX "re-download the model's index and shards together"

/* ------------------------------------------------------------------------ */

static char *join(const char *dir, const char *name, strata_error *err)
{
	size_t a = strlen(dir), b = strlen(name);
	while (a > 1 && dir[a - 1] == '/') /* models/x/ joins as models/x/name */
		a--;
	char *p = strata_alloc_or_error(a + b + 2, "path", err);
	if (!p)
		return NULL;
	memcpy(p, dir, a);
	p[a] = '/';
	memcpy(p + a + 1, name, b + 1);
	return p;
}

/* A regular file (following links): a directory or FIFO named like a
 * shard counts as missing, and is never opened. */
static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static strata_status check_shard_name(const char *s, const char *tensor,
				      strata_error *err)
{
	size_t n = strlen(s);
	if (n == 0 || n > 255 || strchr(s, '/') || !strcmp(s, ".") ||
	    !strcmp(s, "..")) {
		char a[96], b[96];
		return strata_fail(err, STRATA_E_CKPT_INDEX,
				   "shard names in the index must be plain file names in the model directory",
				   "'" INDEX_NAME "': tensor '%s' names shard '%s', which is not a plain file name",
				   strata_escape(a, sizeof a, tensor, strlen(tensor)),
				   strata_escape(b, sizeof b, s, n));
	}
	return STRATA_OK;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The distinct shard names of the weight map, sorted. */
static strata_status shard_list(json_t *map, const char ***out, size_t *n,
				strata_error *err)
{
	size_t cap = json_object_size(map);
	const char **v = strata_calloc_or_error(cap ? cap : 1, sizeof *v,
						"shard list", err);
	if (!v)
		return STRATA_E_NOMEM;
	const char *k;
	json_t *x;
	size_t m = 0;
	json_object_foreach(map, k, x) {
		if (!json_is_string(x)) {
			char a[96];
			strata_free(v);
			return strata_fail(err, STRATA_E_CKPT_INDEX, FIX_INDEX,
					   "'" INDEX_NAME "': weight_map entry '%s' is not a shard file name",
					   strata_escape(a, sizeof a, k, strlen(k)));
		}
		strata_status s = check_shard_name(json_string_value(x), k, err);
		if (s) {
			strata_free(v);
			return s;
		}
		v[m++] = json_string_value(x);
	}
	qsort(v, m, sizeof *v, cmp_str);
	size_t u = 0;
	for (size_t i = 0; i < m; i++)
		if (u == 0 || strcmp(v[u - 1], v[i]))
			v[u++] = v[i];
	*out = v;
	*n = u;
	return STRATA_OK;
}

/* Every index entry is in the shard it names; every tensor is indexed. */
static strata_status cross_check(strata_catalog *c, json_t *map,
				 const char *dir, strata_error *err)
{
	const char *k;
	json_t *x;
	char a[96], b[96];
	json_object_foreach(map, k, x) {
		const strata_tensor *t = strata_catalog_find(c, k);
		const char *want = json_string_value(x);
		strata_escape(a, sizeof a, k, strlen(k));
		strata_escape(b, sizeof b, want, strlen(want));
		if (!t)
			return strata_fail(err, STRATA_E_CKPT_INDEX, FIX_INDEX,
					   "'%s/" INDEX_NAME "' lists tensor '%s' in shard '%s', but that shard has no such tensor",
					   dir, a, b);
		const char *path = c->files[t->file].path;
		size_t pl = strlen(path), wl = strlen(want);
		if (pl < wl || strcmp(path + pl - wl, want) ||
		    (pl > wl && path[pl - wl - 1] != '/'))
			return strata_fail(err, STRATA_E_CKPT_INDEX, FIX_INDEX,
					   "'%s/" INDEX_NAME "' puts tensor '%s' in shard '%s', but it is in '%s'",
					   dir, a, b, path);
	}
	if (json_object_size(map) != c->count) {
		/* some tensor is in a shard but not in the index */
		for (size_t i = 0; i < c->count; i++)
			if (!json_object_get(map, c->tensors[i].name))
				return strata_fail(
					err, STRATA_E_CKPT_INDEX, FIX_INDEX,
					"tensor '%s' in '%s' is not listed in '%s/" INDEX_NAME "'",
					strata_escape(a, sizeof a, c->tensors[i].name,
						      strlen(c->tensors[i].name)),
					c->files[c->tensors[i].file].path, dir);
	}
	return STRATA_OK;
}

static strata_status open_shards(strata_catalog *c, const char *dir,
				 json_t *map, strata_error *err)
{
	const char **shards = NULL;
	size_t n = 0;
	strata_status s = shard_list(map, &shards, &n, err);
	for (size_t i = 0; i < n && !s; i++) {
		char *path = join(dir, shards[i], err);
		if (!path) {
			s = STRATA_E_NOMEM;
			break;
		}
		if (!exists(path))
			s = strata_fail(err, STRATA_E_CKPT_INDEX,
					"download the missing shard, or use the index that matches the shards present",
					"'%s/" INDEX_NAME "' lists shard '%s', which does not exist",
					dir, shards[i]);
		else
			s = strata__safetensors_open_file(c, path, err);
		strata_free(path);
	}
	strata_free(shards);
	return s ? s : cross_check(c, map, dir, err);
}

static strata_status open_index(strata_catalog *c, const char *dir,
				const char *path, strata_error *err)
{
	char *text = NULL;
	size_t len = 0;
	strata_status s = strata_file_read_all(path, MAX_INDEX_BYTES, &text,
					       &len, err);
	if (s)
		return s;
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	strata_free(text);
	/* jansson leaves the text empty when its lexer cannot allocate */
	if (!root && (json_error_code(&je) == json_error_out_of_memory ||
		      !je.text[0]))
		return strata_fail(err, STRATA_E_NOMEM, "free some memory",
				   "'%s': out of memory parsing the index", path);
	if (!root)
		return strata_fail(err, STRATA_E_CKPT_INDEX, FIX_INDEX,
				   "'%s' is not valid JSON: %s (line %d)", path,
				   je.text, je.line);
	json_t *map = json_is_object(root) ? json_object_get(root, "weight_map")
					   : NULL;
	if (!json_is_object(map))
		s = strata_fail(err, STRATA_E_CKPT_INDEX, FIX_INDEX,
				"'%s' has no \"weight_map\" object", path);
	else
		s = open_shards(c, dir, map, err);
	json_decref(root);
	return s;
}

/* ------------------------------------------------------------------------ */

strata_status strata__safetensors_open_dir(strata_catalog *c, const char *dir,
					   strata_error *err)
{
	char *index = join(dir, INDEX_NAME, err);
	if (!index)
		return STRATA_E_NOMEM;
	strata_status s;
	if (exists(index)) {
		s = open_index(c, dir, index, err);
	} else {
		char *single = join(dir, SINGLE_NAME, err);
		if (!single) {
			strata_free(index);
			return STRATA_E_NOMEM;
		}
		if (exists(single))
			s = strata__safetensors_open_file(c, single, err);
		else
			s = strata_fail(err, STRATA_E_NOT_FOUND,
					"give a directory holding model.safetensors or model.safetensors.index.json and its shards, or a .gguf file",
					"'%s' holds neither " SINGLE_NAME " nor " INDEX_NAME,
					dir);
		strata_free(single);
	}
	strata_free(index);
	return s;
}
