/* test_fuzz_corpus.c - replays the committed fuzz corpora (and any crash
 * inputs kept there as regressions) through the GGUF and safetensors
 * parsers in the normal build, so CI runs them without libFuzzer: each
 * input must give a catalog or an error with a message and a fix. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "checkpoint/readers.h"

#define CORPUS STRATA_SOURCE_DIR "/tests/fuzz/corpus/"

static int replay(const char *dir, strata_format f)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *ent;
	int files = 0, ok = 0;
	while ((ent = readdir(d))) {
		if (ent->d_name[0] == '.')
			continue;
		char path[1024];
		snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
		FILE *fp = fopen(path, "rb");
		assert_non_null(fp);
		fseek(fp, 0, SEEK_END);
		long n = ftell(fp);
		fseek(fp, 0, SEEK_SET);
		unsigned char *buf = malloc(n ? (size_t)n : 1);
		assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
		fclose(fp);
		strata_catalog *c = NULL;
		strata_error e;
		assert_int_equal(strata__catalog_create(f, &c, &e), 0);
		strata_status s = f == STRATA_FORMAT_GGUF
			? strata__gguf_read_mem(c, buf, (size_t)n, ent->d_name, &e)
			: strata__safetensors_read_mem(c, buf, (size_t)n, ent->d_name, &e);
		if (s && (!e.message[0] || !e.fix[0]))
			fail_msg("%s: error without message or fix", path);
		ok += s == STRATA_OK;
		strata_catalog_destroy(c);
		free(buf);
		files++;
	}
	closedir(d);
	assert_true(files > 0);
	assert_true(ok > 0); /* the seeds are valid files */
	return files;
}

static void gguf_corpus_replays(void **s)
{
	(void)s;
	replay(CORPUS "fuzz_gguf", STRATA_FORMAT_GGUF);
}

static void safetensors_corpus_replays(void **s)
{
	(void)s;
	replay(CORPUS "fuzz_safetensors", STRATA_FORMAT_SAFETENSORS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(gguf_corpus_replays),
		cmocka_unit_test(safetensors_corpus_replays),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
