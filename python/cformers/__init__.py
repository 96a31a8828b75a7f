"""cformers from Python: MindFormers- and Hugging Face-style names over libcformers.

    import cformers
    cfg = cformers.AutoConfig.from_pretrained("llama2_7b")        # or a YAML file, or an HF dir
    tok = cformers.AutoTokenizer.from_pretrained("tok512.model")
    model = cformers.AutoModel.from_pretrained("stories260K.ckpt")
    logits = model(tok.encode("Once upon a time"))                # NumPy [n, vocab]
    print(model.generate("Once upon a time", max_new_tokens=50))
    cformers.Trainer("tiny_shakespeare", train_dataset="input.txt").train()
    cformers.pipeline("text_generation", model="stories260K.ckpt")("Once")

C errors are raised as CformersError with the library's message. docs/python.md.
"""
from .errors import CformersError
from ._lib import API_VERSION
from .configuration import AutoConfig
from .tokenization import AutoTokenizer
from .modeling import AutoModel, AutoModelForCausalLM, GPT2LMHeadModel, LlamaForCausalLM, PreTrainedModel
from .trainer import Trainer, TrainerCallback
from .pipelines import pipeline, TextGenerationPipeline

__version__ = "0.1.0"
__all__ = ["AutoConfig", "AutoTokenizer", "AutoModel", "AutoModelForCausalLM", "LlamaForCausalLM", "GPT2LMHeadModel",
           "PreTrainedModel", "Trainer", "TrainerCallback", "pipeline", "TextGenerationPipeline", "CformersError",
           "API_VERSION"]
