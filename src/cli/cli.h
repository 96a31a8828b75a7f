/* The cformers command: one entry point per subcommand, each in its own file. Every
 * subcommand handles --help, returns 0 on success, 1 on failure at run time and 2 on
 * misuse (bad flags), after printing a one-line reason to stderr. */
#ifndef CFORMERS_CLI_H
#define CFORMERS_CLI_H

#include <stdbool.h>

int cmd_train(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_preprocess(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_dashboard(int argc, char **argv);

/* True when argv holds -h or --help. */
bool cli_wants_help(int argc, char **argv);

/* For servers that run until Ctrl-C: cli_block_stop_signals blocks SIGINT and SIGTERM in
 * the calling thread (call it before starting threads, which inherit the mask) and
 * cli_wait_stop_signal returns once one arrives. */
void cli_block_stop_signals(void);
void cli_wait_stop_signal(void);

/* For subcommands whose implementation lands with a later issue: prints what it will
 * do and which issue brings it, and returns 1. */
int cli_not_yet(const char *name, const char *what, const char *issue);

/* Prints "cformers NAME: <message>" to stderr; returns 2 (misuse exit code). */
int cli_usage_error(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
