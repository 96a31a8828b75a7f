/* Internal: a set of trained low-rank adapters in memory (cformers' layout), read from a
 * Hugging Face PEFT directory or a LoRA run's checkpoint, written as a PEFT directory,
 * applied unmerged by inference (src/infer/block.c) or merged into a base. docs/lora.md. */
#ifndef CFORMERS_IO_LORA_ADAPTER_H
#define CFORMERS_IO_LORA_ADAPTER_H

#include "cformers/checkpoint.h"
#include "cformers/graph.h"
#include "cformers/model_config.h"
#include "models/family.h"

/* The adapter of one linear: delta W = scale B A. */
typedef struct cf_lora_pair {
    cf_weight_role role; /* the base weight (a LINEAR step's matrix or fused tensor) */
    long layer;
    int64_t in, out;
    float *a; /* [rank, in] */
    float *b; /* [out, rank], rows in cformers' order (LLaMA q/k: interleaved pairs) */
    float *bt; /* [rank, out]: B transposed for inference's row-wise path (cf_lora_adapter_transpose), or NULL */
} cf_lora_pair;

typedef struct cf_lora_adapter {
    int64_t rank;
    double alpha;
    double scale; /* alpha / rank times the user's multiplier (--lora PATH:SCALE) */
    int n;
    cf_lora_pair *pairs;
    /* A LoRA run's checkpoint records the base checkpoint it started from (load_checkpoint):
     * its path and cf_lora_base_hash; "" / 0 when unknown (a PEFT directory, a fresh base). */
    char base_path[1024];
    uint64_t base_hash;
} cf_lora_adapter;

/* The identity of a base model's weights: FNV-1a over each stored weight tensor's name and
 * CRC-32C (optimizer state, tokenizer and adapters left out), read from the index alone. */
uint64_t cf_lora_base_hash(const cf_ckpt *c);

/* Reads `path`: a PEFT directory (adapter_config.json + adapter_model.safetensors, tensor
 * names base_model.model.<module>.lora_A.weight, q/k B rows in Hugging Face's rotate-half
 * order), or a LoRA run's checkpoint (tensors <module>.lora_A.weight, metadata "lora").
 * Shapes are checked against m; a tensor naming no linear of m, DoRA, rsLoRA and per-module
 * ranks are refused naming them. scale = alpha / rank * multiplier. */
int cf_lora_adapter_load(const char *path, const cf_model_config *m, double multiplier, cf_lora_adapter *a,
                         cf_error *err);
/* "PATH[:SCALE]" (SCALE a number; a path with a colon and no number after it is a path). */
int cf_lora_adapter_load_spec(const char *spec, const cf_model_config *m, cf_lora_adapter *a, cf_error *err);
/* The adapters of a training graph (their current values, copied). */
int cf_lora_adapter_from_graph(cf_graph *g, const cf_model_config *m, int64_t rank, double alpha, cf_lora_adapter *a,
                               cf_error *err);
/* Writes dir/adapter_config.json and dir/adapter_model.safetensors as PEFT's
 * save_pretrained would (f32, Hugging Face's layout); creates dir. */
int cf_lora_peft_write(const char *dir, const cf_model_config *m, const cf_lora_adapter *a, cf_error *err);
/* The pair of (role, layer), or NULL. */
const cf_lora_pair *cf_lora_adapter_find(const cf_lora_adapter *a, cf_weight_role role, long layer);
/* Sets each pair's bt (B transposed), once. */
void cf_lora_adapter_transpose(cf_lora_adapter *a);
void cf_lora_adapter_free(cf_lora_adapter *a);

#endif
