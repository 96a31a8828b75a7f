#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/infer.h"
#include "cli.h"
#include "cli_parse.h"

static const char usage[] =
    "usage: cformers validate --model MODEL --reference FILE [--tolerance X] [--dtype f32|bf16|q8_0|q4_0]\n"
    "\n"
    "Runs the reference's prompt tokens through the model (a cformers checkpoint, a Hugging Face\n"
    "directory or a GGUF file, the last two converted in memory) and compares the logits of every\n"
    "position with the reference (written by tools/torch_logits_reference.py or any tool that\n"
    "writes the format of docs/validate-reference.md). Prints max absolute and relative error\n"
    "per position, then PASS (exit 0) or FAIL (exit 1).\n"
    "\n"
    "  --tolerance X   largest allowed relative error, max|diff| / max|reference| (default 1e-4)\n"
    "  --dtype D       dtype of the weights matmuls read (default: as the checkpoint stores its\n"
    "                  matrices, f16 as f32; a model converted in memory is converted to it,\n"
    "                  default f32)\n"
    "  --lora PATH[:SCALE]  apply a LoRA adapter unmerged: a PEFT directory or a LoRA run's\n"
    "                  checkpoint, its alpha / rank times SCALE (default 1; docs/lora.md)\n"
    "\n"
    "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
    "  cformers validate --model out/tiny.ckpt --reference tests/fixtures/infer/tiny.logits\n";

int cmd_validate(int argc, char **argv) {
    const char *cmd = "validate";
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    const char *model = NULL, *reference = NULL, *lora = NULL;
    double tolerance = 1e-4;
    cf_dtype dtype = CF_DTYPE_COUNT; /* as stored */
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *v;
        int rc = 0;
        if (cli_flag_value(cmd, argc, argv, &i, &v) != 0) return 2;
        if (strcmp(flag, "--model") == 0) model = v;
        else if (strcmp(flag, "--reference") == 0) reference = v;
        else if (strcmp(flag, "--lora") == 0) lora = v;
        else if (strcmp(flag, "--tolerance") == 0) rc = cli_parse_double(cmd, flag, v, 0.0, 1e9, &tolerance);
        else if (strcmp(flag, "--dtype") == 0) rc = cli_parse_dtype(cmd, flag, v, &dtype);
        else return cli_usage_error(cmd, "unknown option '%s'", flag);
        if (rc) return rc;
    }
    if (!model || !reference) return cli_usage_error(cmd, "--model and --reference are required");
    if (cli_check_weight_dtype(cmd, dtype) != 0) return 2;
    cf_error err;
    cf_logits_reference ref;
    if (cf_logits_reference_load(reference, &ref, &err) != 0) {
        fprintf(stderr, "cformers validate: %s\n", err.msg);
        return 1;
    }
    cf_model_source *src = cli_open_model(cmd, model, dtype);
    if (!src) {
        cf_logits_reference_free(&ref);
        return 1;
    }
    cf_infer_options opt = {.weight_dtype = dtype, .max_seq = ref.n_tokens, .lora = lora};
    cf_infer_model *m = cf_infer_load(model, &opt, &err);
    cf_model_source_close(src);
    cf_validate_row *rows = cf_xcalloc((size_t)ref.n_tokens, sizeof *rows);
    if (!m || cf_validate(m, &ref, rows, &err) != 0) {
        fprintf(stderr, "cformers validate: %s\n", err.msg);
        cf_infer_free(m), cf_logits_reference_free(&ref), free(rows);
        return 1;
    }
    printf("%5s %8s %12s %12s %s\n", "pos", "token", "max_abs", "max_rel", "argmax model/ref");
    double worst = 0.0;
    for (long t = 0; t < ref.n_tokens; t++) {
        printf("%5ld %8d %12.3e %12.3e %d/%d\n", t, ref.tokens[t], rows[t].max_abs, rows[t].max_rel,
               rows[t].argmax_model, rows[t].argmax_reference);
        worst = rows[t].max_rel > worst ? rows[t].max_rel : worst;
    }
    bool pass = worst <= tolerance;
    printf("%s: max relative error %.3e %s tolerance %.3e over %ld positions\n", pass ? "PASS" : "FAIL", worst,
           pass ? "<=" : ">", tolerance, ref.n_tokens);
    cf_infer_free(m), cf_logits_reference_free(&ref), free(rows);
    return pass ? 0 : 1;
}
