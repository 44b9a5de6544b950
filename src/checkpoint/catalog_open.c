/* catalog_open.c - strata_catalog_open: a model path to a catalog, choosing
 * the reader (a directory of safetensors, one .safetensors file, or a GGUF
 * file recognised by its magic) (layer: checkpoint). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/readers.h"

/* GGUF files are recognised by their magic, whatever their name. */
static strata_status sniff_gguf(const char *path, int *fd_out,
				struct stat *st, bool *is_gguf,
				strata_error *err)
{
	int fd;
	strata_status open_s = strata_file_open_regular(path, 0, &fd, st, err);
	if (open_s)
		return open_s;
	unsigned char magic[4] = {0};
	*is_gguf = false;
	if (st->st_size >= 4) {
		strata_status s = strata_pread_full(fd, magic, 4, 0, path, err);
		if (s) {
			strata_sys.close(fd);
			return s;
		}
		*is_gguf = !memcmp(magic, "GGUF", 4);
	}
	/* a .gguf without the magic goes to the GGUF reader, which says so */
	size_t n = strlen(path);
	if (n >= 5 && !strcmp(path + n - 5, ".gguf"))
		*is_gguf = true;
	*fd_out = fd;
	return STRATA_OK;
}

strata_status strata_catalog_open(const char *model_path, strata_catalog **out,
				  strata_error *err)
{
	struct stat st;
	strata_status why = strata_model_path_explain(model_path, false, err);
	if (why)
		return why;
	if (stat(model_path, &st) != 0)
		return strata_fail(err, STRATA_E_NOT_FOUND,
				   "give a model directory or a .gguf/.safetensors file",
				   "cannot open model '%s': %s", model_path,
				   strerror(errno));
	/* refuse FIFOs and devices before opening: a FIFO would block */
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return strata_fail(err, STRATA_E_CKPT_FORMAT,
				   "give a model directory or a .gguf/.safetensors file",
				   "'%s' is neither a directory nor a regular file",
				   model_path);
	strata_catalog *c = NULL;
	strata_status s;
	if (S_ISDIR(st.st_mode)) {
		s = strata__catalog_create(STRATA_FORMAT_SAFETENSORS, &c, err);
		if (!s)
			s = strata__safetensors_open_dir(c, model_path, err);
	} else {
		int fd = -1;
		struct stat fst;
		bool gguf = false;
		s = sniff_gguf(model_path, &fd, &fst, &gguf, err);
		if (s)
			return s;
		s = strata__catalog_create(gguf ? STRATA_FORMAT_GGUF
						: STRATA_FORMAT_SAFETENSORS,
					   &c, err);
		if (!s && gguf)
			s = strata__gguf_read_fd(c, fd, (uint64_t)fst.st_size,
						 model_path, err);
		if (!s && gguf)
			strata__catalog_set_identity(c, &fst);
		strata_sys.close(fd);
		if (!s && !gguf)
			s = strata__safetensors_open_file(c, model_path, err);
	}
	if (s) {
		strata_catalog_destroy(c);
		return s;
	}
	*out = c;
	return STRATA_OK;
}
