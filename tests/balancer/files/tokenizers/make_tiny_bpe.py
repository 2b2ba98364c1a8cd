# SPDX-License-Identifier: Apache-2.0
"""Write ``tiny-bpe/``: a small byte-level BPE tokenizer in the Hugging Face format (what a
model's repository ships: ``tokenizer.json`` and ``tokenizer_config.json`` with a chat
template), trained with the ``tokenizers`` library on this repository's documentation.
The balancer's tests read it as they would read a real model's tokenizer.

    python tests/balancer/files/tokenizers/make_tiny_bpe.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|eot_id|>"]
# the shape of Llama 3's template: a header per message, the content, an end-of-turn token
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def main() -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = sorted((ROOT / "docs").glob("*.md"))
    tokenizer.train([str(p) for p in texts], trainer)
    out = HERE / "tiny-bpe"
    out.mkdir(exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
              "chat_template": CHAT_TEMPLATE, "tokenizer_class": "PreTrainedTokenizerFast"}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
