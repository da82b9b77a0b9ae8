"""The agent: a conversation session where a model chooses, and the executor acts.

Owns the tool surface a caller sees (surface.py), the controlled loop (session.py), a tool call run and
recorded as one step (calls.py), the model's steps and the budget review (decisions.py), what the model
reads (context.py) with stale reads folded (stale.py), tether's own words in a turn (texts.py), the
bookkeeping of one turn (turn.py), how steps run, directly or durably (steps.py), the recovery of a turn
whose process died (recovery.py), dialogue memory and compression (memory.py), the files a person ticks
(outputs.py), and the system prompts (prompts/); a person's yes or no is read by models/replies.py.
May import models, execution, tasks, store, config, runtime, events, resilience and errors; never
interfaces (tests/test_public_api.py checks the picture).
"""
