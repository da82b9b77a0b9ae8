"""Dialogue memory (``store/memories.py``): how well it finds what was said, and what a search costs as
history grows.

Quality, on the labelled bilingual set ``bench/data/memory_eval.json``: 48 earlier threads (375 turns,
24 in Chinese and 24 in English, about games, scripts, research and personal matters, with near-twin
threads as distractors) and 144 questions a person asks later in a new thread — 79 paraphrases that
share few words with their answer, 41 that name one distinctive word, 24 asked in the other language —
in ``tune`` and ``held``-out halves (the code is never adjusted against the held half): recall@5 (a
labelled turn among the first five) and MRR, per half, language and kind of question, for

- ours: Chinese as character pairs and stemmed Latin words, BM25 over SQLite FTS5;
- SQLite's own ``trigram`` tokenizer on the same text (what the issue suggested first): a two-character
  Chinese word matches nothing, so most Chinese questions find nothing;
- semantic: WordLlama's static embeddings, whose weights ship inside its wheel (MIT, 16 MB, no download
  at run time) — only when it is installed (``pip install wordllama``): it is not a dependency;
- fused: ours and semantic by reciprocal-rank fusion;
- ours as an agent sees it: after ``agent/recall.py``'s filter (a memory must share a quarter of what is
  asked).

Cost: one search at 1,000 and at 100,000 remembered turns (histories of README sentence pairs: a
vocabulary like a real one, shipped in the repo), paired and interleaved (the ratio is the growth), and
at 100,000 next to the bare FTS5 match of every term asked (no bound, no owner filter, no join).
"""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.paired import paired, row
from tether.agent.recall import Semantic, found_for
from tether.store import terms as words
from tether.store.database import Database
from tether.store.memories import MemoryStore, shown_turn

DATA = Path(__file__).with_name("data") / "memory_eval.json"
AGENT = "assistant"
TOP = 5
ROUNDS = 60
WARMUP = 5
SIZES = (1_000, 100_000)
INSTALLATION = "0123456789abcdef"

Ranker = Callable[[str], list[str]]  # a question → doc ids, best first


def load() -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    docs: dict[str, dict[str, Any]] = {}
    for dialogue in data["dialogues"]:
        for turn in dialogue["turns"]:
            key = f"{dialogue['thread']}:{turn['turn']}"
            docs[key] = {
                "thread": dialogue["thread"], "turn": turn["turn"], "date": dialogue["date"],
                "user": turn["user"], "assistant": turn["assistant"],
            }  # fmt: skip
    return docs, data["queries"]


def ours(home: Path, docs: dict[str, dict[str, Any]]) -> tuple[MemoryStore, Ranker, Ranker]:
    db = Database(f"sqlite:///{home / 'memory.db'}", installation=INSTALLATION)
    store = MemoryStore(db)
    store.keep_many(
        (
            AGENT,
            d["thread"],
            d["turn"],
            f"{d['date']}T12:00:00+00:00",
            d["user"],
            d["assistant"],
            _before(docs, d),
        )
        for d in docs.values()
    )

    def rank(question: str) -> list[str]:
        return [f"{m.thread_id}:{m.turn}" for m in store.search(AGENT, question, limit=TOP * 3)]

    def as_seen(question: str) -> list[str]:
        asked = set(words.asked(question))
        found = found_for(store, AGENT, question, "bench-none", asked, TOP * 3, None) if asked else []
        return [f"{m.thread_id}:{m.turn}" for m in found]

    return store, rank, as_seen


def _before(docs: dict[str, dict[str, Any]], doc: dict[str, Any]) -> str:
    """What the person said in the turn before (kept with a turn, as a session keeps it)."""
    previous = docs.get(f"{doc['thread']}:{doc['turn'] - 1}")
    return previous["user"] if previous else ""


def _text(docs: dict[str, dict[str, Any]], doc: dict[str, Any]) -> str:
    return shown_turn(doc["user"], doc["assistant"], _before(docs, doc))


def trigram(docs: dict[str, dict[str, Any]]) -> Ranker:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(key UNINDEXED, body, tokenize = 'trigram')")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(k, _text(docs, d)) for k, d in docs.items()])

    def rank(question: str) -> list[str]:
        pieces = [p for p in words._RUN.findall(question.lower()) if len(p) >= 3]
        if not pieces:
            return []
        match = " OR ".join('"' + p.replace('"', '""') + '"' for p in pieces)
        return [
            r[0]
            for r in conn.execute("SELECT key FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 15", (match,))
        ]

    return rank


def semantic(docs: dict[str, dict[str, Any]]) -> Ranker | None:
    import importlib

    try:  # the bench's environment has it (``make bench``); the test environment does not
        np: Any = importlib.import_module("numpy")
        wordllama: Any = importlib.import_module("wordllama")
    except ImportError:
        return None
    # The weights and the tokenizer are inside the wheel: point the loader there and forbid downloads.
    folder = Path(str(wordllama.__file__)).parent
    model = wordllama.WordLlama.load(cache_dir=folder, disable_download=True)
    keys = list(docs)
    vectors = np.asarray(model.embed([_text(docs, docs[k]) for k in keys], norm=True))

    def rank(question: str) -> list[str]:
        query = np.asarray(model.embed([question], norm=True))[0]
        order = np.argsort(-(vectors @ query))[:15]
        return [keys[int(i)] for i in order]

    return rank


def as_seen_semantic(store: MemoryStore, docs: dict[str, dict[str, Any]]) -> Ranker | None:
    """What an agent recalls with ``[agent].recall_semantic = "on"`` (when WordLlama is installed)."""
    from tether.agent.embedder import load
    from tether.store.vectors import MemoryVectors

    embedder = load("on")
    if embedder is None:
        return None
    vectors = MemoryVectors(store.db)
    for doc in docs.values():
        memory_id = store.turn_id(doc["thread"], doc["turn"])
        if memory_id is not None:
            vectors.put(memory_id, AGENT, embedder.name, embedder.embed([_text(docs, doc)])[0])
    semantic = Semantic(embedder, vectors)

    def rank(question: str) -> list[str]:
        asked = set(words.asked(question))
        found = found_for(store, AGENT, question, "bench-none", asked, TOP * 3, semantic) if asked else []
        return [f"{m.thread_id}:{m.turn}" for m in found]

    return rank


def fused(*rankers: Ranker, k: int = 60) -> Ranker:
    def rank(question: str) -> list[str]:
        scores: dict[str, float] = {}
        for ranker in rankers:
            for position, key in enumerate(ranker(question)):
                scores[key] = scores.get(key, 0.0) + 1.0 / (k + position + 1)
        return sorted(scores, key=lambda key: -scores[key])

    return rank


def quality(ranker: Ranker, queries: list[dict[str, Any]]) -> dict[str, tuple[float, float, int]]:
    """(recall@5, MRR, n) per group: each half, each language within it, and all."""
    groups: dict[str, list[tuple[bool, float]]] = {}
    for q in queries:
        found = ranker(q["query"])
        answers = set(q["answers"])
        first = next((i for i, key in enumerate(found) if key in answers), None)
        hit = first is not None and first < TOP
        reciprocal = 0.0 if first is None else 1.0 / (first + 1)
        for group in ("all", q["split"], f"{q['split']}/{q['lang']}", f"{q['split']}/{q['kind']}"):
            groups.setdefault(group, []).append((hit, reciprocal))
    return {
        g: (sum(h for h, _ in v) / len(v), statistics.fmean(r for _, r in v), len(v))
        for g, v in groups.items()
    }


def _print_quality(name: str, table: dict[str, tuple[float, float, int]]) -> None:
    shown = "  ".join(
        f"{g} {table[g][0]:.2f}/{table[g][1]:.2f}"
        for g in ("tune", "held", "held/zh", "held/en", "held/paraphrase", "held/keyword", "held/cross")
        if g in table
    )
    print(f"  {name:<34} {shown}")


def history_sentences() -> list[str]:
    """Sentences to fill a long history with: the README's (English and Chinese), shipped in the repo."""
    import re

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    return [s.strip() for s in re.split(r"[。！？\n.!?]", text) if 8 <= len(s.strip()) <= 200]


def grown(home: Path, sentences: list[str], size: int) -> MemoryStore:
    """A store of ``size`` turns, each a pair of sentences drawn at random (a vocabulary like a real
    history's: a few words everywhere, most rare)."""
    db = Database(f"sqlite:///{home / f'grown-{size}.db'}", installation=INSTALLATION)
    store = MemoryStore(db)
    rng = random.Random(size)
    store.keep_many(
        (
            AGENT,
            f"g{i // 8}",
            i % 8 + 1,
            "2026-10-01T12:00:00+00:00",
            rng.choice(sentences),
            rng.choice(sentences),
        )
        for i in range(size)
    )
    return store


def memory(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if DATA.exists():
        _quality(home)
    else:
        print(f"\ndialogue memory: quality not measured, {DATA.name} is not in this checkout")
    _cost(home)


def _quality(home: Path) -> None:
    docs, queries = load()
    print(
        f"\ndialogue memory: {len(docs)} turns, {len(queries)} questions (recall@{TOP}/MRR; tune, held-out)"
    )
    store, rank, as_seen = ours(home, docs)
    rankers: list[tuple[str, Ranker]] = [
        ("ours (pairs + words, FTS5 BM25)", rank),
        ("SQLite trigram", trigram(docs)),
    ]
    meaning = semantic(docs)
    if meaning is not None:
        rankers += [
            ("semantic (WordLlama, in its wheel)", meaning),
            ("fused: ours + semantic (RRF)", fused(rank, meaning)),
        ]
    else:
        print("  (semantic and fused: not measured, wordllama is not installed here: make bench installs it)")
    rankers.append(("as an agent recalls (lexical, filtered)", as_seen))
    with_meaning = as_seen_semantic(store, docs)
    if with_meaning is not None:
        rankers.append(("as an agent recalls, semantic on", with_meaning))
    for name, ranker in rankers:
        _print_quality(name, quality(ranker, queries))


def _cost(home: Path) -> None:
    """One search at 1,000 and at 100,000 remembered turns, paired (the same questions in the same
    order on both sides), and at 100,000 next to the bare FTS5 match of every term asked."""
    sentences = history_sentences()
    print("\nmemory search cost (histories of README sentence pairs; questions: parts of its sentences)")
    small, large = (grown(home, sentences, size) for size in SIZES)
    rng = random.Random(7)
    sequence = [rng.choice(sentences)[:40] for _ in range(ROUNDS + WARMUP)]
    ours_picks, floor_picks = iter(sequence), iter(sequence)
    pair = paired(
        lambda: large.search(AGENT, next(ours_picks)),
        lambda: small.search(AGENT, next(floor_picks)),
        ROUNDS,
        WARMUP,
    )
    row(f"one search at {SIZES[1]:,} turns vs {SIZES[0]:,}", pair, "the same searches on 100x less history")
    raw = sqlite3.connect(str(home / f"grown-{SIZES[1]}.db"))
    bare = "SELECT rowid FROM memory_terms WHERE memory_terms MATCH ? ORDER BY bm25(memory_terms) LIMIT 15"
    ours_picks, floor_picks = iter(sequence), iter(sequence)

    def floor() -> None:
        asked = words.asked(next(floor_picks))
        if asked:
            raw.execute(bare, (" OR ".join(f'"{t}"' for t in asked),)).fetchall()

    pair = paired(lambda: large.search(AGENT, next(ours_picks)), floor, ROUNDS, WARMUP)
    row(
        f"one search at {SIZES[1]:,} turns vs bare FTS5",
        pair,
        "every term asked matched and ranked, no bound, no owner filter, no join",
    )
