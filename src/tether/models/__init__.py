"""Models: clients that turn messages and tool definitions into a decision.

The ``Model`` protocol and the values that cross it (base.py), OpenAI-compatible chat completions
(openai_compat.py), the offline planner (offline.py, composing offline_conversation.py, offline_reading.py,
offline_free.py, offline_choosing.py, offline_answers.py, offline_texts.py, offline_docs.py and
offline_digest.py over
understand.py; a yes or no in replies.py), JSON decision mode for
models without tool calls (jsondecide.py, jsonfix.py), content-policy refusals (refusals.py), and choosing
a model from settings (factory.py). Models never call tools. May import ``tether.errors``,
``tether.config``, ``tether.credentials`` and ``tether.resilience`` only.
"""
