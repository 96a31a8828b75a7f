"""pipeline("text_generation", model=...): prompt in, generated text out."""
from .modeling import AutoModel, PreTrainedModel
from .tokenization import AutoTokenizer

_TASKS = ("text_generation", "text-generation")


class TextGenerationPipeline:
    def __init__(self, model, tokenizer=None, **defaults):
        self.model = model if isinstance(model, PreTrainedModel) else AutoModel.from_pretrained(model)
        if tokenizer is not None and not isinstance(tokenizer, AutoTokenizer):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.tokenizer = tokenizer
        self.defaults = defaults

    def __call__(self, prompts, **kwargs):
        """[{"generated_text": prompt + continuation}] per prompt (a list for a list)."""
        args = dict(self.defaults, **kwargs)
        single = isinstance(prompts, str)
        out = [[{"generated_text": self.model.generate(p, tokenizer=self.tokenizer, **args)}]
               for p in ([prompts] if single else prompts)]
        return out[0] if single else out


def pipeline(task, model=None, tokenizer=None, **kwargs):
    """MindFormers' / Hugging Face's entry point; task "text_generation" (or "text-generation")."""
    if task not in _TASKS:
        raise ValueError(f"task {task!r} is not supported (cformers has: text_generation)")
    if model is None:
        raise ValueError("pipeline needs model= (a checkpoint, a Hugging Face directory or a loaded model)")
    return TextGenerationPipeline(model, tokenizer, **kwargs)
