/* quantize_support.h - what the strata quantize tests share: running
 * quantize and logits through the built tool, reading a tensor's payload
 * and f32 files, and comparing logits (tests/cli, header-only). */
#ifndef STRATA_TESTS_CLI_QUANTIZE_SUPPORT_H
#define STRATA_TESTS_CLI_QUANTIZE_SUPPORT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/checkpoint.h"
#include "support/cli_runner.h"

/* Runs `strata quantize in out --type type`; asserts exit 0. */
static inline void q_quantize(const char *in, const char *out, const char *type)
{
	const char *argv[] = {"quantize", in, out, "--type", type, NULL};
	cli_result r;
	assert_int_equal(cli_run(argv, NULL, 0, NULL, &r), 0);
	if (r.exit_code != 0)
		fail_msg("strata quantize %s %s --type %s: exit %d: %s", in, out,
			 type, r.exit_code, r.err);
	cli_result_free(&r);
}

/* Reads a whole little-endian f32 file; *n values. */
static inline float *q_read_f32(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	float *p = malloc((size_t)len + 4);
	assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	*n = (size_t)len / 4;
	return p;
}

/* `strata logits model --tokens tokens --out out --device cpu`, read. */
static inline float *q_logits(const char *model, const char *tokens,
			      const char *out, size_t *n)
{
	const char *argv[] = {"logits", model, "--tokens", tokens, "--out", out,
			      "--device", "cpu", NULL};
	cli_result r;
	assert_int_equal(cli_run(argv, NULL, 0, NULL, &r), 0);
	if (r.exit_code != 0)
		fail_msg("strata logits %s: exit %d: %s", model, r.exit_code, r.err);
	cli_result_free(&r);
	return q_read_f32(out, n);
}

/* The largest and the RMS difference of two equal-length vectors. */
static inline void q_diff(const float *a, const float *b, size_t n,
			  double *max, double *rms)
{
	double m = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		m = d > m ? d : m;
		s += d * d;
	}
	*max = m;
	*rms = sqrt(s / (double)n);
}

/* A tensor's payload as stored (malloc'd). */
static inline unsigned char *q_payload(const strata_catalog *c,
				       const strata_tensor *t)
{
	FILE *f = fopen(strata_catalog_file_at(c, t->file)->path, "rb");
	assert_non_null(f);
	unsigned char *p = malloc(t->bytes ? t->bytes : 1);
	assert_int_equal(fseek(f, (long)t->offset, SEEK_SET), 0);
	assert_int_equal(fread(p, 1, t->bytes, f), t->bytes);
	fclose(f);
	return p;
}

/* A tensor as f32 (malloc'd), through strata's exact dequantizer. */
static inline float *q_values(const strata_catalog *c, const strata_tensor *t)
{
	unsigned char *p = q_payload(c, t);
	float *x = malloc(t->elements * sizeof *x);
	strata_error err;
	if (strata_dtype_to_f32(t->dtype, p, t->elements, x, &err))
		fail_msg("%s: %s", t->name, err.message);
	free(p);
	return x;
}

static inline strata_catalog *q_open(const char *path)
{
	strata_catalog *c = NULL;
	strata_error err;
	if (strata_catalog_open(path, &c, &err))
		fail_msg("%s: %s", path, err.message);
	return c;
}

#endif
