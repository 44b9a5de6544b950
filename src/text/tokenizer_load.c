/* tokenizer_load.c - strata_tokenizer_load: MODEL (a directory with
 * tokenizer.json and maybe tokenizer_config.json, a tokenizer.json file,
 * or a .gguf) to a tokenizer, choosing the loader (layer: text). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "strata/checkpoint.h"
#include "text/internal.h"

/* ------------------------------------------------------------------------ */
/* Loading MODEL                                                            */
/* ------------------------------------------------------------------------ */

static strata_status load_gguf(const char *path, strata_tokenizer **out,
			       strata_error *err)
{
	strata_catalog *c = NULL;
	strata_status st = strata_catalog_open(path, &c, err);
	if (st)
		return st;
	const strata_gguf *g = strata_catalog_gguf(c);
	st = g ? strata_tokenizer_from_gguf(g, path, out, err)
	       : strata_fail(err, STRATA_E_TEXT_TOKENIZER,
			     "give a .gguf file or a directory with "
			     "tokenizer.json", "%s is not a GGUF file", path);
	strata_catalog_destroy(c);
	return st;
}

/* Length of dir without its trailing slashes ("/" stays), so a joined path
 * reads models/x/tokenizer.json for models/x/. */
static size_t dir_len(const char *dir)
{
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	return n;
}

/* tokenizer_config.json's bos/eos/unk/pad names (a string, or an object
 * with "content"), when the directory has one and they name tokens. A
 * missing or unreadable config changes nothing: it is optional. */
static void read_config(strata_tokenizer *t, const char *dir)
{
	text_buf path = {0};
	char *text = NULL;
	size_t len = 0;
	if (strata__text_buf_add(&path, dir, dir_len(dir), NULL) ||
	    strata__text_buf_add(&path, "/tokenizer_config.json", 22, NULL) ||
	    strata_file_read_all(path.data, 16u << 20, &text, &len, NULL)) {
		strata__text_buf_fini(&path);
		return;
	}
	json_t *root = json_loadb(text, len, 0, NULL);
	static const char *const keys[] = {"bos_token", "eos_token",
					   "unk_token", "pad_token"};
	int32_t *dst[] = {&t->specials.bos, &t->specials.eos, &t->specials.unk,
			  &t->specials.pad};
	for (int i = 0; root && i < 4; i++) {
		json_t *v = json_object_get(root, keys[i]);
		if (json_is_object(v))
			v = json_object_get(v, "content");
		if (!json_is_string(v))
			continue;
		int32_t id = strata__text_smap_get(&t->piece_map,
						   json_string_value(v),
						   json_string_length(v));
		if (id >= 0)
			*dst[i] = id;
	}
	json_decref(root);
	strata_free(text);
	strata__text_buf_fini(&path);
}

/* MODEL given as one .safetensors file: its tokenizer is the folder's, as
 * its config.json is. */
static strata_status load_beside(const char *file, strata_tokenizer **out,
				 strata_error *err)
{
	const char *slash = strrchr(file, '/');
	text_buf dir = {0};
	strata_status st = slash
		? strata__text_buf_add(&dir, file, (size_t)(slash - file) + 1,
				       err)
		: strata__text_buf_add(&dir, ".", 1, err);
	if (!st)
		st = strata_tokenizer_load(dir.data, out, err);
	strata__text_buf_fini(&dir);
	return st;
}

strata_status strata_tokenizer_load(const char *model_path,
				    strata_tokenizer **out, strata_error *err)
{
	struct stat sb;
	strata_status why = model_path
		? strata_model_path_explain(model_path, true, err) : STRATA_OK;
	if (why)
		return why;
	if (!model_path || stat(model_path, &sb) != 0)
		return strata_fail(err, STRATA_E_NOT_FOUND,
				   "give a directory holding tokenizer.json or "
				   "a .gguf file", "model '%s' does not exist",
				   model_path ? model_path : "(null)");
	if (!S_ISDIR(sb.st_mode) && strata_str_ends_with(model_path, ".safetensors"))
		return load_beside(model_path, out, err);
	if (!S_ISDIR(sb.st_mode) && !strata_str_ends_with(model_path, ".json"))
		return load_gguf(model_path, out, err);
	text_buf path = {0};
	strata_status st = strata__text_buf_add(
		&path, model_path,
		S_ISDIR(sb.st_mode) ? dir_len(model_path) : strlen(model_path),
		err);
	if (!st && S_ISDIR(sb.st_mode))
		st = strata__text_buf_add(&path, "/tokenizer.json", 15, err);
	char *json = NULL;
	size_t len = 0;
	if (!st)
		st = strata_file_read_all(path.data, STRATA_TEXT_MAX_JSON_BYTES,
					  &json, &len, err);
	if (st == STRATA_E_NOT_FOUND || st == STRATA_E_IO)
		strata_error_set_fix(err, "a model directory needs "
				     "tokenizer.json (or pass a .gguf file)");
	if (!st)
		st = strata_tokenizer_from_json(json, len, path.data, out, err);
	if (!st && S_ISDIR(sb.st_mode))
		read_config(*out, model_path);
	strata_free(json);
	strata__text_buf_fini(&path);
	return st;
}
