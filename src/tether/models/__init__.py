"""Models: clients that turn messages and tool definitions into a decision, with shared resilience.

OpenAI-compatible chat completions (openai_compat.py), the offline planner (offline.py), JSON decision
mode for models without tool calls (jsondecide.py, jsonfix.py), retry and circuit breaker
(resilience.py). Models never call tools. May import ``tether.errors`` and ``tether.config`` only.
"""
