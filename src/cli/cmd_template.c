/* cmd_template.c - `strata template TEMPLATE.jinja|MODEL --messages FILE`:
 * a conversation rendered through a chat template, byte for byte as
 * transformers' apply_chat_template renders it (layer: cli). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/commands.h"
#include "strata/text.h"

static void help(FILE *f)
{
	fprintf(f,
		"usage: strata template TEMPLATE.jinja|MODEL --messages FILE.json\n"
		"           [--add-generation-prompt] [--bos-token S] [--eos-token S]\n"
		"           [--tools FILE.json] [--var NAME=JSON] [--now DATE]\n"
		"\n"
		"Renders a conversation through a chat template and writes the text\n"
		"to stdout, byte for byte. TEMPLATE.jinja is a template file; MODEL\n"
		"is a directory with tokenizer_config.json (its chat_template, and\n"
		"its bos_token / eos_token as defaults) or a .gguf file\n"
		"(tokenizer.chat_template).\n"
		"\n"
		"  --messages FILE.json     a JSON array of {\"role\", \"content\"} ('-': stdin)\n"
		"  --add-generation-prompt  end with the prompt of the assistant's turn\n"
		"  --bos-token S            the template's bos_token (default: the model's)\n"
		"  --eos-token S            the template's eos_token (default: the model's)\n"
		"  --tools FILE.json        a JSON array of tool schemas (default: none)\n"
		"  --var NAME=JSON          one more template variable, e.g.\n"
		"                           --var enable_thinking=false (repeatable)\n"
		"  --now DATE               strftime_now's date, YYYY-MM-DD[THH:MM:SS] UTC\n"
		"                           (default: the local clock)\n"
		"\n"
		"A template's own raise_exception exits 1 with its message.\n");
}

static strata_status read_input(const char *path, char **text, size_t *len,
				strata_error *err)
{
	if (!strcmp(path, "-"))
		return strata_cli_read_stdin((size_t)256 << 20, text, len, err);
	return strata_file_read_all(path, (uint64_t)256 << 20, text, len, err);
}

/* YYYY-MM-DD[THH:MM:SS] as UTC seconds. */
static bool parse_now(const char *s, int64_t *out)
{
	struct tm tm = {0};
	char tail;
	int n = sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon,
		       &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &tail);
	if (n != 3 && n != 6)
		return false;
	if (n == 3 && strlen(s) != 10)
		return false;
	if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
	    tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
	    tm.tm_sec > 60)
		return false;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	*out = (int64_t)timegm(&tm);
	return true;
}

typedef struct args {
	const char *source, *messages, *tools, *bos, *eos, *now;
	bool agp;
	char *vars; /* a JSON object text built from --var */
	size_t vars_len, vars_cap;
} args;

/* Appends "NAME": JSON to the extra-variables object. */
static int add_var(args *a, const char *spec)
{
	const char *eq = strchr(spec, '=');
	if (!eq || eq == spec)
		return strata_cli_usage("template", "--var needs NAME=JSON, got "
					"'%s'", spec);
	size_t need = a->vars_len + strlen(spec) + 8;
	if (need > a->vars_cap) {
		char *p = strata_realloc(a->vars, need * 2);
		if (!p)
			return strata_cli_usage("template", "out of memory");
		a->vars = p;
		a->vars_cap = need * 2;
	}
	a->vars_len += (size_t)snprintf(a->vars + a->vars_len,
					a->vars_cap - a->vars_len, "%s\"%.*s\": %s",
					a->vars_len ? ", " : "{",
					(int)(eq - spec), spec, eq + 1);
	return 0;
}

static int parse_args(int argc, char **argv, args *a)
{
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i];
		const char **slot = !strcmp(o, "--messages") ? &a->messages
				    : !strcmp(o, "--bos-token")	 ? &a->bos
				    : !strcmp(o, "--eos-token")	 ? &a->eos
				    : !strcmp(o, "--tools")	 ? &a->tools
				    : !strcmp(o, "--now")	 ? &a->now
								 : NULL;
		bool is_var = !strcmp(o, "--var");
		if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
			help(stdout);
			return -1;
		} else if (!strcmp(o, "--add-generation-prompt")) {
			a->agp = true;
		} else if (slot || is_var) {
			if (i + 1 >= argc)
				return strata_cli_usage("template", "%s needs a "
							"value", o);
			if (is_var) {
				int rc = add_var(a, argv[++i]);
				if (rc)
					return rc;
			} else {
				*slot = argv[++i];
			}
		} else if (o[0] == '-' && o[1]) {
			return strata_cli_unknown_option("template", o, help);
		} else if (!a->source) {
			a->source = o;
		} else {
			return strata_cli_usage("template", "more than one "
						"TEMPLATE or MODEL given");
		}
	}
	if (!a->source)
		return strata_cli_usage("template", "no TEMPLATE.jinja or MODEL "
					"given");
	if (!a->messages)
		return strata_cli_usage("template", "no --messages FILE.json "
					"given");
	return 0;
}

/* The template's text and the model's tokens: a template file, or a model
 * directory / .gguf. */
static strata_status load_source(const char *path, char **text, size_t *len,
				 char **bos, char **eos, strata_error *err)
{
	struct stat sb;
	*bos = *eos = NULL;
	if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
	    !strata_str_ends_with(path, ".gguf"))
		return strata_file_read_all(path, STRATA_TEMPLATE_MAX_SOURCE_BYTES,
					    text, len, err);
	return strata_chat_template_load(path, text, len, bos, eos, err);
}

static int render(const args *a, strata_error *err)
{
	char *src = NULL, *bos = NULL, *eos = NULL, *msgs = NULL, *tools = NULL;
	char *out = NULL;
	size_t src_len = 0, msgs_len = 0, tools_len = 0, out_len = 0;
	strata_chat_template *t = NULL;
	strata_chat_template_options o;
	strata_chat_template_options_init(&o);
	strata_status st = load_source(a->source, &src, &src_len, &bos, &eos, err);
	if (!st)
		st = read_input(a->messages, &msgs, &msgs_len, err);
	if (!st && a->tools)
		st = strata_file_read_all(a->tools, (uint64_t)64 << 20, &tools,
					  &tools_len, err);
	if (!st)
		st = strata_chat_template_create(src, src_len, &t, err);
	if (!st) {
		o.add_generation_prompt = a->agp;
		o.bos_token = a->bos ? a->bos : bos;
		o.eos_token = a->eos ? a->eos : eos;
		o.tools_json = tools;
		o.extra_json = a->vars;
		if (a->now && !parse_now(a->now, &o.now_unix))
			st = strata_fail(err, STRATA_E_USAGE, "write the date as "
					 "2026-07-26 or 2026-07-26T09:30:00",
					 "--now: '%s' is not a date", a->now);
		o.fixed_time = a->now != NULL;
	}
	if (!st)
		st = strata_chat_template_render(t, msgs, msgs_len, &o, &out,
						 &out_len, err);
	if (!st && (fwrite(out, 1, out_len, stdout) != out_len ||
		    fflush(stdout) != 0))
		st = strata_fail(err, STRATA_E_IO, "check the output",
				 "writing the rendering failed");
	strata_free(out);
	strata_chat_template_destroy(t);
	strata_free(src);
	strata_free(bos);
	strata_free(eos);
	strata_free(msgs);
	strata_free(tools);
	return st;
}

int strata_cmd_template(int argc, char **argv)
{
	args a = {0};
	int rc = parse_args(argc, argv, &a);
	if (rc) {
		strata_free(a.vars);
		return rc < 0 ? STRATA_EXIT_OK : rc;
	}
	if (a.vars) {
		a.vars[a.vars_len] = '}';
		a.vars[a.vars_len + 1] = '\0';
	}
	strata_error err;
	strata_status st = render(&a, &err);
	strata_free(a.vars);
	return st ? strata_cli_fail(&err) : STRATA_EXIT_OK;
}
