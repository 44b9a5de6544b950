/* test_template_corpus.c - replays every input of
 * tests/fuzz/corpus/fuzz_template (the seeds, libFuzzer's finds and the
 * crashes fixed since) through the fuzz target's own checks in the normal
 * build, so a fixed crash stays fixed (layer: text). */
#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "text_fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void every_corpus_input_replays(void **state)
{
	(void)state;
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/fuzz_template",
		 STRATA_SOURCE_DIR);
	DIR *d = opendir(dir);
	assert_non_null(d);
	size_t count = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char rel[600];
		snprintf(rel, sizeof rel, "tests/fuzz/corpus/fuzz_template/%s",
			 e->d_name);
		size_t n = 0;
		char *bytes = tt_read(rel, &n);
		assert_non_null(bytes);
		assert_int_equal(LLVMFuzzerTestOneInput((const uint8_t *)bytes, n), 0);
		free(bytes);
		count++;
	}
	closedir(d);
	assert_true(count >= 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_corpus_input_replays),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
