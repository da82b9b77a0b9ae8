"""The agent: a conversation session where a model chooses, and the executor acts.

Owns the tool surface a caller sees (surface.py), the controlled loop (session.py), dialogue memory and
compression (memory.py), the thread record (threads.py) and the system prompts (prompts/).
May import models, execution, tasks, store, config, events and errors; never interfaces.
"""
