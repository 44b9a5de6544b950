/* commands.h - the strata commands, one file each (layer: cli).
 *
 * Each command takes argc/argv after the command name (argv[0] is the
 * command) and returns the process exit code: 0 success, 1 runtime or input
 * error, 2 usage error (DESIGN.md). */
#ifndef STRATA_CLI_COMMANDS_H
#define STRATA_CLI_COMMANDS_H

#include "strata/base.h"

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

/* Prints a usage error for command `cmd` and returns 2. */
int strata_cli_usage(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Parses a non-negative decimal integer option value (no sign, no
 * garbage, no overflow) naming the option in the error. */
strata_status strata_cli_parse_u64(const char *option, const char *text,
				   uint64_t *out, strata_error *err);

/* One entry per command file cmd_NAME.c. */
int strata_cmd_shard(int argc, char **argv);

#endif
