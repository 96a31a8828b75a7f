/* The named presets. Shapes are the published ones (Meta's params.json / Hugging Face
 * config.json for LLaMA, OpenAI's hparams.json for GPT-2, llama2.c's model table for the
 * "stories" models); training settings follow each family's paper or reference trainer. */
#include "models/presets.h"

#include <string.h>

#include "cformers/config.h"

#define MC "model.model_config."
#define RC "runner_config."
#define LR "lr_schedule."

/* LLaMA 2 (Touvron et al. 2023): AdamW beta2 0.95, wd 0.1, clip 1.0, cosine to 10%, 2000 warmup. */
static const char *const llama2_family[] = {
    MC "arch=llama", MC "vocab_size=32000", MC "max_position_embeddings=4096", MC "rope_theta=10000",
    MC "rms_norm_eps=1e-5", MC "bos_token_id=1", MC "eos_token_id=2", MC "compute_dtype=bfloat16",
    RC "seq_length=4096", LR "learning_rate=3e-4", LR "lr_end=3e-5", LR "warmup_steps=2000", NULL};
static const char *const llama2_7b[] = {MC "hidden_size=4096", MC "num_layers=32", MC "num_heads=32",
                                        MC "intermediate_size=11008", NULL};
static const char *const llama2_13b[] = {MC "hidden_size=5120", MC "num_layers=40", MC "num_heads=40",
                                         MC "intermediate_size=13824", NULL};
static const char *const llama2_70b[] = {MC "hidden_size=8192", MC "num_layers=80", MC "num_heads=64",
                                         MC "num_kv_heads=8", MC "intermediate_size=28672",
                                         LR "learning_rate=1.5e-4", LR "lr_end=1.5e-5", NULL};

/* LLaMA 3 8B: 128K vocabulary, GQA 4:1, rope_theta 500000, 8K context. No RoPE scaling:
 * that arrived with LLaMA 3.1. */
static const char *const llama3_family[] = {
    MC "arch=llama", MC "vocab_size=128256", MC "max_position_embeddings=8192", MC "rope_theta=500000",
    MC "rms_norm_eps=1e-5", MC "bos_token_id=128000", MC "eos_token_id=128001", MC "compute_dtype=bfloat16",
    RC "seq_length=8192", LR "learning_rate=3e-4", LR "lr_end=3e-5", LR "warmup_steps=2000", NULL};
static const char *const llama3_8b[] = {MC "hidden_size=4096", MC "num_layers=32", MC "num_heads=32",
                                        MC "num_kv_heads=8", MC "intermediate_size=14336", NULL};
/* LLaMA 3.1: the same shapes with a 128K context through RoPE frequency scaling (factor 8
 * above the 8K pre-training context, smooth between the low/high frequency bands). */
static const char *const llama3_1_scaling[] = {
    MC "max_position_embeddings=131072", MC "rope_scaling_factor=8", MC "rope_low_freq_factor=1",
    MC "rope_high_freq_factor=4", MC "rope_original_max_position=8192", NULL};

/* GPT-2 (Radford et al. 2019), trained as nanoGPT does: lr 6e-4 to 6e-5, 2000 warmup. */
static const char *const gpt2_family[] = {
    MC "arch=gpt2", MC "vocab_size=50257", MC "max_position_embeddings=1024", MC "rms_norm_eps=1e-5",
    MC "tie_word_embeddings=true", MC "bos_token_id=50256", MC "eos_token_id=50256", MC "compute_dtype=bfloat16",
    RC "seq_length=1024", LR "learning_rate=6e-4", LR "lr_end=6e-5", LR "warmup_steps=2000", NULL};
static const char *const gpt2_small[] = {MC "hidden_size=768", MC "num_layers=12", MC "num_heads=12", NULL};
static const char *const gpt2_medium[] = {MC "hidden_size=1024", MC "num_layers=24", MC "num_heads=16", NULL};
static const char *const gpt2_large[] = {MC "hidden_size=1280", MC "num_layers=36", MC "num_heads=20", NULL};
static const char *const gpt2_xl[] = {MC "hidden_size=1600", MC "num_layers=48", MC "num_heads=25", NULL};

/* llama2.c's TinyStories models: tied embeddings, llama2 tokenizer, lr 5e-4 cosine to 0. */
static const char *const stories_family[] = {
    MC "arch=llama", MC "vocab_size=32000", MC "rms_norm_eps=1e-5", MC "tie_word_embeddings=true",
    MC "bos_token_id=1", MC "eos_token_id=2", LR "learning_rate=5e-4", LR "lr_end=0",
    LR "warmup_steps=1000", NULL};
static const char *const llama_15m[] = {MC "hidden_size=288", MC "num_layers=6", MC "num_heads=6",
                                        MC "intermediate_size=768", RC "seq_length=256", NULL};
static const char *const llama_42m[] = {MC "hidden_size=512", MC "num_layers=8", MC "num_heads=8",
                                        MC "intermediate_size=1376", RC "seq_length=1024", NULL};
static const char *const llama_110m[] = {MC "hidden_size=768", MC "num_layers=12", MC "num_heads=12",
                                         MC "intermediate_size=2048", RC "seq_length=1024", NULL};
/* The shape of shared/data/stories260K/stories260K.bin (512-token vocabulary, GQA 2:1). */
static const char *const stories260k[] = {MC "vocab_size=512", MC "hidden_size=64", MC "num_layers=5",
                                          MC "num_heads=8", MC "num_kv_heads=4", MC "intermediate_size=172",
                                          RC "seq_length=512", NULL};

/* Small enough to train visibly on two cores in a few minutes: about 0.9M parameters,
 * the 512-token stories260K tokenizer, character-ish sequences of 128 tokens. */
static const char *const tiny_shakespeare[] = {
    MC "vocab_size=512",
    MC "hidden_size=128",
    MC "num_layers=4",
    MC "num_heads=4",
    MC "intermediate_size=384",
    RC "seq_length=128",
    RC "batch_size=16",
    RC "train_steps=400",
    RC "log_interval=10",
    RC "eval_interval=100",
    RC "eval_steps=4",
    RC "sample_interval=200",
    RC "sample_tokens=100",
    RC "save_interval=200",
    LR "learning_rate=1e-3",
    LR "lr_end=1e-4",
    LR "warmup_steps=40",
    "optimizer.weight_decay=0.1",
    "output_dir=output/tiny_shakespeare",
    "train_dataset.data_dir=output/tiny_shakespeare/data",
    "train_dataset.tokenizer=" CF_PRESET_DATA "/stories260K/tok512.model",
    "train_dataset.eval_split=0.05",
    NULL};

static const cf_preset presets[] = {
    {"llama2_7b", "LLaMA 2 7B: 32 layers, 4096 wide, 4K context", {llama2_family, llama2_7b}},
    {"llama2_13b", "LLaMA 2 13B: 40 layers, 5120 wide", {llama2_family, llama2_13b}},
    {"llama2_70b", "LLaMA 2 70B: 80 layers, 8192 wide, 8 KV heads", {llama2_family, llama2_70b}},
    {"llama3_8b", "LLaMA 3 8B: 128K vocabulary, 8 KV heads, rope_theta 500000", {llama3_family, llama3_8b}},
    {"llama3_1_8b", "LLaMA 3.1 8B: llama3_8b with RoPE scaling to a 128K context",
     {llama3_family, llama3_8b, llama3_1_scaling}},
    {"gpt2", "GPT-2 small (124M): 12 layers, 768 wide", {gpt2_family, gpt2_small}},
    {"gpt2_medium", "GPT-2 medium (355M): 24 layers, 1024 wide", {gpt2_family, gpt2_medium}},
    {"gpt2_large", "GPT-2 large (774M): 36 layers, 1280 wide", {gpt2_family, gpt2_large}},
    {"gpt2_xl", "GPT-2 XL (1.5B): 48 layers, 1600 wide", {gpt2_family, gpt2_xl}},
    {"llama_15m", "llama2.c stories15M: 6 layers, 288 wide, 256 context", {stories_family, llama_15m}},
    {"llama_42m", "llama2.c stories42M: 8 layers, 512 wide, 1K context", {stories_family, llama_42m}},
    {"llama_110m", "llama2.c stories110M: 12 layers, 768 wide, 1K context", {stories_family, llama_110m}},
    {"stories260k", "llama2.c stories260K (the shared test checkpoint): 5 layers, 64 wide",
     {stories_family, stories260k}},
    {"tiny_shakespeare", "demo: 0.9M-parameter LLaMA for Tiny Shakespeare, minutes on 2 cores",
     {stories_family, tiny_shakespeare}},
};

enum { PRESET_COUNT = sizeof presets / sizeof presets[0] };

const cf_preset *cf_preset_find(const char *name) {
    for (int i = 0; i < PRESET_COUNT; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

int cf_config_preset_count(void) { return PRESET_COUNT; }

const char *cf_config_preset_name(int index) { return index >= 0 && index < PRESET_COUNT ? presets[index].name : NULL; }

const char *cf_config_preset_description(int index) {
    return index >= 0 && index < PRESET_COUNT ? presets[index].description : NULL;
}
