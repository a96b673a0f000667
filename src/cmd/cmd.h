/*
 * cmd.h - the subcommands. Each `cmd_foo(argc, argv)` parses its own options
 * (argv[0] is "foo") and returns the exit status (SPEC §1): 0 ok, 1 a gate
 * failed or the verdict is negative, 2 usage or bad input, 3 runtime failure.
 * src/cmd is the only place that prints results or decides exit codes.
 *
 * To add a command: write src/cmd/foo.c, declare cmd_foo here, add a row to
 * the table in main.c, write docs/lynn-foo.md, add a test.
 */
#ifndef LYNN_CMD_H
#define LYNN_CMD_H

#include <stdbool.h>
#include <stdio.h>

#include "lynn/err.h"
#include "lynn/model.h"

struct lynn_cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

/* Print "lynn: <message>" to stderr and return the exit status for err. */
int cmd_fail(const struct lynn_err *err);
/* Print "lynn CMD: <message>" and a hint to stderr; return 2. */
int cmd_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Parse an option's number: an integer in [lo, hi], or a finite double in
 * [lo, hi]. On bad input print "lynn CMD: OPT: 'S' is not ..." and return 2. */
int cmd_opt_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
int cmd_opt_double(const char *cmd, const char *opt, const char *s, double lo, double hi,
		   double *out);
/* --device: the runner is CPU-only, so anything but "cpu" is a usage error (2). */
int cmd_opt_device(const char *cmd, const char *s, enum lynn_device *out);
/* Handle the options every command takes (-q, -v): returns true if `opt`
 * was one of them. */
bool cmd_common_opt(int opt);
/* Is stderr a terminal and logging not silenced (progress bars on)? */
bool cmd_progress_enabled(void);

/* --- the commands --- */
int cmd_help(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_sanity(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_push(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_quant_verify(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
