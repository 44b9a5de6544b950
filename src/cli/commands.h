/* commands.h - the strata commands, one file each (layer: cli).
 *
 * Each command takes argc/argv after the command name (argv[0] is the
 * command) and returns the process exit code: 0 success, 1 runtime or input
 * error, 2 usage error (DESIGN.md). */
#ifndef STRATA_CLI_COMMANDS_H
#define STRATA_CLI_COMMANDS_H

#include <stdio.h>

#include "strata/base.h"
#include "strata/plan.h"
#include "strata/infer.h"

#define STRATA_EXIT_OK 0
#define STRATA_EXIT_ERROR 1
#define STRATA_EXIT_USAGE 2

typedef struct strata_command {
	const char *name;
	const char *summary;
	int (*main)(int argc, char **argv);
} strata_command;

/* The table of commands, ending with a NULL name (main.c). */
extern const strata_command strata_commands[];

/* Prints err as "strata: error: ..." / "  fix: ..." and returns the exit
 * code that goes with it (2 for usage errors, else 1). */
int strata_cli_fail(const strata_error *err);

/* An output file option's path (--telemetry, --out, --stats) that could
 * never be written (a socket, a folder, a link to nothing:
 * strata_file_check_output) is refused before anything runs: returns 0, or
 * prints the error naming the option and returns 1. */
int strata_cli_output(const char *option, const char *path);

/* Prints a usage error for command `cmd` and returns 2. */
int strata_cli_usage(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Parses a finite decimal number option value in [lo, hi] into *out;
 * returns 0, or prints a usage error for command `cmd` and returns 2. */
/* An unknown option: a usage error (exit 2) that names the likeliest option
 * of the command's help text, when one is close ("did you mean"). */
int strata_cli_unknown_option(const char *cmd, const char *opt,
			      void (*help)(FILE *));

/* Reads all of stdin (at most cap bytes, else E_USAGE) into *text
 * (NUL-terminated, strata_free), *len bytes; on failure nothing is kept. */
strata_status strata_cli_read_stdin(size_t cap, char **text, size_t *len,
				    strata_error *err);

/* What run and chat both generate with: the sampler and the -n, --seed
 * and --threads values. */
typedef struct strata_cli_generation {
	strata_sampler_params *sp;
	uint64_t *n, *threads;
	bool *seed_given;
} strata_cli_generation;

/* Parses one of --temperature, --top-p, --min-p, --repeat-penalty, -n,
 * --top-k, --seed, --threads into g (messages name `cmd`); *known false
 * for any other option. Returns 0 or the exit code of a bad value. */
int strata_cli_generation_option(const char *cmd, const char *opt,
				 const char *v, const strata_cli_generation *g,
				 bool *known);
int strata_cli_parse_float(const char *cmd, const char *option,
			   const char *text, float lo, float hi, float *out);

/* Parses a non-negative decimal integer option value (no sign, no
 * garbage, no overflow) naming the option in the error. */
strata_status strata_cli_parse_u64(const char *option, const char *text,
				   uint64_t *out, strata_error *err);

/* One entry per command file cmd_NAME.c. */
int strata_cmd_tokenize(int argc, char **argv);
int strata_cmd_template(int argc, char **argv);
int strata_cmd_shard(int argc, char **argv);
int strata_cmd_plan(int argc, char **argv);
int strata_cmd_run(int argc, char **argv);
int strata_cmd_logits(int argc, char **argv);
int strata_cmd_inspect(int argc, char **argv);
int strata_cmd_batch(int argc, char **argv);
int strata_cmd_chat(int argc, char **argv);
int strata_cmd_calibrate(int argc, char **argv);
int strata_cmd_bench(int argc, char **argv);
int strata_cmd_serve(int argc, char **argv);
int strata_cmd_quantize(int argc, char **argv);

/* Residency options shared by plan, run and logits (residency_options.c):
 * --residency auto|resident|host[:D]|disk, --device-memory SIZE,
 * --host-memory SIZE, --lookahead N, --queue N, --context N, --batch N,
 * --prefill-chunk N, --exclude GLOB (repeatable), --device cpu|cuda[:N],
 * --h2d-bandwidth / --disk-bandwidth / --memory-bandwidth SIZE[/s].
 * `--opt VALUE` and `--opt=VALUE` both work. */
typedef struct strata_cli_residency {
	strata_plan_options plan; /* ready for strata_plan_create */
	bool device_given;	  /* --device was on the command line */
	unsigned device_index;	  /* N of cuda:N */
	const char **exclude;	  /* pointers into argv, strata_free'd */
	size_t exclude_count;
	/* The commands that load a model (strata_cli_model_args) also take
	 * --no-mmap (no_map), --quiet (quiet: nothing on stderr but
	 * errors) and --precision fast|exact (precision, default fast). */
	bool loads, no_map, quiet;
	strata_precision precision;
} strata_cli_residency;

void strata_cli_residency_init(strata_cli_residency *r);
void strata_cli_residency_fini(strata_cli_residency *r);
/* Consumes argv[*i] (and its value, advancing *i) when it is a residency
 * option: returns 1. Returns 0, touching nothing, for any other argument.
 * Returns -1 with err filled (E_USAGE, E_NOMEM) for a bad value. */
int strata_cli_residency_option(strata_cli_residency *r, int argc,
				char **argv, int *i, strata_error *err);
/* Prints the residency option lines of a command's --help to f, leaving
 * out the entries named in omit (STRATA_CLI_HELP_NO_* flags): a command's
 * help lists exactly what it accepts. */
#define STRATA_CLI_HELP_NO_BATCH 1u /* run, logits: one sequence; batch:
				       its own --batch entry */
#define STRATA_CLI_HELP_NO_LOAD 2u /* plan: no --precision, --no-mmap,
					 --quiet */
void strata_cli_residency_print_help(FILE *f, unsigned omit);

/* The argument loop of the commands that run a model (run, logits,
 * batch): residency options into r; --help / -h (help(stdout), returns
 * -1); every other option takes a value, handed to option(ctx, name,
 * value, &known), which returns 0 or an exit code and sets known false for
 * a name it does not take, or STRATA_CLI_FLAG for an option that takes no
 * value (--chat: the value it was shown is not consumed); one MODEL into
 * *model. Returns 0, -1 or the exit code of a usage error naming command
 * `cmd`. */
#define STRATA_CLI_FLAG (-2)
typedef int (*strata_cli_option_fn)(void *ctx, const char *opt,
				    const char *value, bool *known);
int strata_cli_model_args(const char *cmd, int argc, char **argv,
			  strata_cli_residency *r, void (*help)(FILE *),
			  strata_cli_option_fn option, void *ctx,
			  const char **model);

/* The load's progress bar of the commands that load a model: on stderr
 * when it is a terminal and --quiet was not given, drawn from one second
 * into the load (a fast load shows none). strata_cli_load_bar_init before
 * strata_session_open, with strata_cli_load_bar_update as the session's
 * load_progress and the bar as its user; strata_progress_finish after the
 * open ends the bar's line if it was drawn. */
void strata_cli_load_bar_init(strata_progress *bar,
			      const strata_cli_residency *r);
void strata_cli_load_bar_update(void *bar, uint64_t done_bytes,
				uint64_t total_bytes);

/* The rates file strata calibrate writes (strata_plan_rates_path): *found
 * false and STRATA_OK when there is none; an unreadable or malformed file
 * is its error (the fix says to calibrate again). */
/* The rates file's rates for r's device into r->plan where no option gave
 * them (strata_plan_rates_apply), so run, logits, batch, bench and serve
 * plan with the rates `strata plan` shows. A missing file changes nothing;
 * an unreadable one is the error. */
strata_status strata_cli_residency_rates(strata_cli_residency *r,
					 strata_error *err);
strata_status strata_cli_load_rates(strata_plan_rates *out, bool *found,
				    strata_error *err);

/* The session options every command that loads one model opens with:
 * r's plan, --exclude list, device index, --precision and --no-mmap, the
 * model and --threads (0: every processor); the command adds its own
 * shape (positions, prefill, plan_shape) and load progress. The
 * pointers are borrowed from r and model: keep both while the options
 * are in use. One translation, so no command drops an option that its
 * help lists (chat and bench once took --no-mmap and never passed it). */
strata_session_options strata_cli_session_options(const strata_cli_residency *r,
						  const char *model,
						  uint64_t threads);

/* strata plan's throughput against --batch (plan_batch.c): the plans of
 * p's inputs at batch 1, 2, 4 ... 256 as a table to f, or as the key
 * "throughput_by_batch" of the object open in j. A point that cannot be
 * planned (other than by not fitting) is left out, with a line saying so
 * in the table. */
void strata_cli_print_batch_curve(FILE *f, const strata_plan *p);
void strata_cli_write_batch_curve(strata_json *j, const strata_plan *p);

/* For the commands that run one sequence (run, logits): --batch above 1
 * is a usage error pointing at strata batch. Returns 0 or the exit code. */
int strata_cli_one_sequence(const char *cmd, const strata_cli_residency *r);

#endif
