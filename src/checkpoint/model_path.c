/* model_path.c - what a MODEL path that strata cannot open holds instead,
 * so the error says what strata reads and how to get it: a Hugging Face
 * hub id, a folder of PyTorch pickles, a SentencePiece-only tokenizer
 * (layer: checkpoint). Trust: only names are looked at, nothing is read. */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "strata/checkpoint.h"

/* "owner/name": one slash, neither part empty, only the characters the
 * hub allows, and not a path that starts with / or . */
static bool looks_like_hub_id(const char *p)
{
	const char *slash = strchr(p, '/');
	if (!slash || slash == p || !slash[1] || strchr(slash + 1, '/') ||
	    p[0] == '.')
		return false;
	for (const char *c = p; *c; c++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			    "0123456789._-/", *c))
			return false;
	return true;
}

/* The first entry of dir whose name ends with one of the suffixes. */
static bool dir_has(const char *dir, const char *const *suffixes,
		    char *found, size_t cap)
{
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool hit = false;
	for (struct dirent *e; !hit && (e = readdir(d));)
		for (const char *const *s = suffixes; *s && !hit; s++)
			if (strata_str_ends_with(e->d_name, *s)) {
				snprintf(found, cap, "%s", e->d_name);
				hit = true;
			}
	closedir(d);
	return hit;
}

strata_status strata_model_path_explain(const char *path, bool tokenizer,
					strata_error *err)
{
	struct stat sb;
	char found[256];
	if (stat(path, &sb) != 0) {
		if (!looks_like_hub_id(path))
			return STRATA_OK;
		strata_fail(err, STRATA_E_NOT_FOUND, "", "'%s' is no file or "
			    "folder here; it looks like a Hugging Face hub "
			    "id", path);
		return strata_error_set_fix(err, "strata reads local files: "
					    "download it first (pip install "
					    "huggingface_hub; hf download %s "
					    "--local-dir DIR) and give DIR",
					    path);
	}
	if (!S_ISDIR(sb.st_mode))
		return STRATA_OK;
	static const char *const pickles[] = {"pytorch_model.bin", ".pt",
					      ".pth", ".ckpt", NULL};
	static const char *const readable[] = {".safetensors", NULL};
	if (!dir_has(path, readable, found, sizeof found) &&
	    dir_has(path, pickles, found, sizeof found))
	{
		strata_fail(err, STRATA_E_NOT_FOUND, "", "'%s' holds PyTorch "
			    "pickle weights ('%s'), which strata does not read "
			    "(loading a pickle can run code); it reads "
			    "*.safetensors or a .gguf file", path, found);
		return strata_error_set_fix(err, "convert them to safetensors "
					    "with transformers: python3 -c "
					    "\"from transformers import "
					    "AutoModelForCausalLM as M; "
					    "M.from_pretrained('%s')."
					    "save_pretrained('%s-safetensors')"
					    "\"", path, path);
	}
	static const char *const spm[] = {"tokenizer.model", NULL};
	static const char *const json[] = {"tokenizer.json", NULL};
	if (tokenizer && !dir_has(path, json, found, sizeof found) &&
	    dir_has(path, spm, found, sizeof found))
	{
		strata_fail(err, STRATA_E_NOT_FOUND, "", "'%s' has "
			    "tokenizer.model (SentencePiece) but no "
			    "tokenizer.json, the file strata reads", path);
		return strata_error_set_fix(err, "write tokenizer.json beside "
					    "it with transformers: python3 -c "
					    "\"from transformers import "
					    "AutoTokenizer as T; "
					    "T.from_pretrained('%s')."
					    "save_pretrained('%s')\"", path,
					    path);
	}
	return STRATA_OK;
}
