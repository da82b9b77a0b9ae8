"""Skills: prompt packages a person can install, never code.

A skill is a folder with a ``SKILL.md`` — YAML front matter (``name``, ``description``, ``when_to_use``)
and a body of instructions — and optional text resources beside it. tether ships a few
(``tether/skills/``); a person adds their own under ``<home>/skills/`` (theirs win on a name clash). The
agent's system prompt lists only names and descriptions; the model loads a body on demand with the
``skills.read`` task, so the prompt stays small however many skills are installed. Skills add no tools and
run nothing: ``skills.read`` returns text. Only real folders and files are read (no links, no hard-linked
files; opened with ``O_NOFOLLOW`` from their folder's descriptor); anything else is left out with the
reason in ``SkillLibrary.problems``.

May import: ``tether.tasks``, ``tether.errors``, yaml. Never execution/agent/interfaces.
"""

from tether.toolkits.skills.library import Skill, SkillLibrary

__all__ = ["Skill", "SkillLibrary"]
