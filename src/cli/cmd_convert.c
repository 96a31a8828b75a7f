#include <stdio.h>
#include <string.h>

#include "cformers/convert.h"
#include "cli.h"
#include "cli_parse.h"

static const char usage[] =
    "usage: cformers convert --from llama2c|hf|gguf SOURCE --output OUT.ckpt [--tokenizer FILE] [--dtype D]\n"
    "       cformers convert --to safetensors|gguf MODEL --output OUT [--dtype q8_0|q4_0]\n"
    "       cformers convert --merge-lora ADAPTER[:SCALE] BASE.ckpt --output OUT.ckpt\n"
    "\n"
    "Imports a model into a cformers checkpoint, or exports a model (a checkpoint, a Hugging Face\n"
    "directory or a GGUF file, the last two converted in memory) for other tools.\n"
    "\n"
    "  --from llama2c MODEL.bin   llama2.c checkpoint: legacy v0 header, or v1 (f32) / v2 (int8)\n"
    "  --from hf DIR              Hugging Face LLaMA or GPT-2: config.json + model.safetensors (or shards\n"
    "                             with model.safetensors.index.json); f32, bf16 or f16\n"
    "  --from gguf FILE.gguf      llama.cpp GGUF (llama, gpt2): f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,\n"
    "                             q4_K, q5_K and q6_K tensors (q8_0, q4_0 and q5_0 kept exactly with\n"
    "                             --dtype q8_0, q4_0 with --dtype q4_0, the others dequantized); its\n"
    "                             tokenizer.ggml.* (llama: SentencePiece, gpt2: byte-level BPE) is embedded\n"
    "  --tokenizer FILE           tokenizer to embed instead (llama2.c tokenizer.bin, SentencePiece\n"
    "                             .model, tokenizer.json, or a directory with GPT-2's encoder.json +\n"
    "                             vocab.bpe; for hf, DIR/tokenizer.model or tokenizer.json by default)\n"
    "  --dtype f32|bf16|f16|q8_0|q4_0  weight dtype in the checkpoint (default f32; q8_0 / q4_0:\n"
    "                             GGUF's int8 / 4-bit blocks of 32 with an f16 scale, matrices only)\n"
    "  --to safetensors CKPT      writes OUT/config.json and OUT/model.safetensors (HF layout)\n"
    "  --to gguf CKPT             writes the GGUF v3 file OUT (llama.cpp); --dtype q8_0 or q4_0\n"
    "                             quantizes the matrices (rows not a multiple of 32 stay f32)\n"
    "  --merge-lora ADAPTER BASE  merges a LoRA adapter (a PEFT directory or a LoRA run's checkpoint,\n"
    "                             times SCALE) into an f32 or bf16 base checkpoint (a quantized one\n"
    "                             is refused: merge, then requantize); docs/lora.md\n"
    "  --output OUT               where to write\n"
    "\n"
    "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
    "  cformers convert --from llama2c tests/fixtures/infer/tiny_v1.bin --output out/tiny.ckpt\n"
    "  cformers convert --from hf tests/fixtures/infer/tiny_hf --output out/tiny_hf.ckpt\n"
    "  cformers convert --to safetensors out/run/checkpoint_step2.ckpt --output out/hf\n"
    "  cformers convert --to gguf out/run/checkpoint_step2.ckpt --output out/model.gguf --dtype q8_0\n";

int cmd_convert(int argc, char **argv) {
    const char *cmd = "convert";
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    const char *from = NULL, *to = NULL, *merge = NULL, *source = NULL, *output = NULL, *tokenizer = NULL;
    cf_dtype dtype = CF_F32;
    bool dtype_given = false;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *v;
        if (cli_flag_value(cmd, argc, argv, &i, &v) != 0) return 2;
        if (strcmp(flag, "--from") == 0 || strcmp(flag, "--to") == 0 || strcmp(flag, "--merge-lora") == 0) {
            if (cli_flag_value(cmd, argc, argv, &i, &source) != 0) return 2;
            *(flag[2] == 'f' ? &from : flag[2] == 't' ? &to : &merge) = v;
        } else if (strcmp(flag, "--output") == 0 || strcmp(flag, "-o") == 0) {
            output = v;
        } else if (strcmp(flag, "--tokenizer") == 0) {
            tokenizer = v;
        } else if (strcmp(flag, "--dtype") == 0) {
            if (cli_parse_dtype(cmd, flag, v, &dtype) != 0) return 2;
            dtype_given = true;
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", flag);
        }
    }
    if (!!from + !!to + !!merge != 1)
        return cli_usage_error(cmd, "give exactly one of --from FORMAT SOURCE, --to FORMAT CKPT or --merge-lora ADAPTER BASE");
    if (!output) return cli_usage_error(cmd, "--output is required");
    cf_convert_options opt = {.dtype = dtype, .tokenizer_path = tokenizer, .progress = true};
    cf_error err;
    int rc;
    /* an export reads any model: a Hugging Face directory or a GGUF file converted in memory */
    cf_model_source *src = NULL;
    if (to && (strcmp(to, "safetensors") == 0 || strcmp(to, "gguf") == 0) && !(src = cli_open_model(cmd, source, CF_F32)))
        return 1;
    if (merge) rc = cf_convert_merge_lora(source, merge, output, &err);
    else if (from && strcmp(from, "llama2c") == 0) rc = cf_import_llama2c(source, output, &opt, &err);
    else if (from && strcmp(from, "hf") == 0) rc = cf_import_hf(source, output, &opt, &err);
    else if (from && strcmp(from, "gguf") == 0) rc = cf_import_gguf(source, output, &opt, &err);
    else if (to && strcmp(to, "safetensors") == 0) rc = cf_export_safetensors(source, output, &err);
    else if (to && strcmp(to, "gguf") == 0) rc = cf_export_gguf_as(source, output, dtype_given ? dtype : CF_DTYPE_COUNT, &err);
    else return cli_usage_error(cmd, "unknown format '%s' (from: llama2c, hf, gguf; to: safetensors, gguf)", from ? from : to);
    cf_model_source_close(src);
    if (rc != 0) {
        fprintf(stderr, "cformers convert: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s\n", output);
    return 0;
}
