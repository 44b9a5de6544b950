/* cmd_quantize.c - `strata quantize IN OUT.gguf --type T [--threads N]`:
 * a safetensors model directory or a GGUF file to GGUF in one of
 * llama-quantize's presets (layer: cli). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "strata/model.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata quantize IN OUT.gguf --type T [--threads N]\n"
		"\n"
		"Writes IN (a model directory of safetensors with config.json,\n"
		"llama, mistral or qwen2; or a .gguf file) to OUT.gguf as\n"
		"llama.cpp's llama-quantize presets do: llama.cpp's tensor names\n"
		"and metadata, the tokenizer carried over, most tensors in T and\n"
		"the ones llama.cpp treats apart (output head, some attn_v and\n"
		"ffn_down, rows that are not whole blocks) in the types it gives\n"
		"them (docs/quantize.md). OUT.gguf appears whole or not at all.\n"
		"\n"
		"options:\n"
		"  --type T      the preset: %s\n"
		"                (F32: every tensor dequantized, bit-exact)\n"
		"  --threads N   encoder threads (default: one per CPU)\n",
		strata_quantize_type_names());
}

static void report(const char *out, const char *type,
		   const strata_quantize_stats *s)
{
	double sec = (double)s->elapsed_ns / 1e9;
	printf("%s: %s, %" PRIu64 " tensors (%" PRIu64 " quantized, %" PRIu64
	       " fallbacks), %.2f MB read, %.2f MB written in %.2f s "
	       "(%.1f MB/s)\n",
	       out, type, s->tensors, s->quantized, s->fallbacks,
	       (double)s->in_bytes / 1e6, (double)s->out_bytes / 1e6, sec,
	       sec > 0 ? (double)s->in_bytes / 1e6 / sec : 0.0);
}

int strata_cmd_quantize(int argc, char **argv)
{
	const char *in = NULL, *out = NULL;
	strata_quantize_options o = {NULL, 0};
	strata_error err;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			help(stdout);
			return STRATA_EXIT_OK;
		} else if (!strcmp(a, "--type")) {
			if (i + 1 >= argc)
				return strata_cli_usage("quantize",
							"--type needs one of %s",
							strata_quantize_type_names());
			o.type = argv[++i];
		} else if (!strcmp(a, "--threads")) {
			uint64_t n;
			if (i + 1 >= argc)
				return strata_cli_usage("quantize",
							"--threads needs a number");
			if (strata_cli_parse_u64("--threads", argv[++i], &n,
						 &err))
				return strata_cli_fail(&err);
			if (n == 0 || n > 1024)
				return strata_cli_usage("quantize",
							"--threads: %" PRIu64
							" is not in 1..1024", n);
			o.threads = (unsigned)n;
		} else if (a[0] == '-' && a[1]) {
			return strata_cli_unknown_option("quantize", a, help);
		} else if (!in) {
			in = a;
		} else if (!out) {
			out = a;
		} else {
			return strata_cli_usage("quantize",
						"unexpected argument '%s'", a);
		}
	}
	if (!in || !out)
		return strata_cli_usage("quantize", "give IN and OUT.gguf");
	if (!o.type)
		return strata_cli_usage("quantize", "--type is required: one of %s",
					strata_quantize_type_names());
	strata_quantize_stats st;
	if (strata_quantize(in, out, &o, &st, &err))
		return strata_cli_fail(&err);
	report(out, o.type, &st);
	return STRATA_EXIT_OK;
}
