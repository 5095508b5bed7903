"""ut-peft: embedding-only reprogramming of Hugging Face models.

``import ut_peft`` registers the ``UT_REPROGRAM`` PEFT method with peft.
"""

from .models import BUNDLED_MODELS, DEFAULT_MODEL, load_model, load_model_and_tokenizer, load_tokenizer

__version__ = "0.1.0"
