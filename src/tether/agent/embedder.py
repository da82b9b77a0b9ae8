"""The optional embedding model of dialogue memory: WordLlama's static embeddings, whose weights and
tokenizer ship inside its wheel (MIT, 16 MB; ``pip install 'tether[semantic]'``) — loaded from there
with downloads forbidden, so nothing is fetched at run time. It is used when installed and
``[agent].recall_semantic = "on"``; otherwise memory is lexical only (the default).

Measured on ``bench/data/memory_eval.json`` (``python -m bench memory``): it finds English paraphrases
that share no word with their answer (held-out recall@5 0.61 lexical → 0.75 fused) and helps Chinese far
less (0.56 → 0.58): no multilingual model ships inside a package on the registry (the candidates —
model2vec's potion models, sentence-transformers, text2vec — download their weights from the hub).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

NAME = "wordllama-l2_supercat-256"
_LOCK = threading.Lock()
_LOADED: list[Any] = []  # [Embedder] once loaded, [None] when it cannot be


class Embedder:
    name = NAME

    def __init__(self, model: Any) -> None:
        self._model = model

    def embed(self, texts: list[str]) -> Any:
        """Normalized float32 vectors, one row per text."""
        import numpy as np

        return np.asarray(self._model.embed(texts, norm=True), dtype=np.float32)


def load(mode: str = "on") -> Embedder | None:
    """The embedder, loaded once per process; None when it is off or not installed."""
    if mode != "on":
        return None
    with _LOCK:
        if not _LOADED:
            _LOADED.append(_load())
        return _LOADED[0]


def _load() -> Embedder | None:
    import importlib
    import logging

    try:
        wordllama: Any = importlib.import_module("wordllama")
    except ImportError:
        return None
    try:  # the weights and the tokenizer are inside the wheel: point the loader there, forbid downloads
        folder = Path(str(wordllama.__file__)).parent
        return Embedder(wordllama.WordLlama.load(cache_dir=folder, disable_download=True))
    except Exception:
        logging.getLogger("tether.memory").warning("WordLlama is installed but would not load", exc_info=True)
        return None
