"""The web research toolkit: search the web, read a URL safely, summarize what was read.

It owns the ``web.*`` tasks (``specs``), the SSRF guard every connection of the toolkit passes
(``guard``: public addresses only unless ``[research]`` relaxes it; the address connected to is the
address checked), the bounded reader (``fetch``: redirects re-checked one by one, size and time
limits, charset detection), page extraction (``extract``: trafilatura, pypdf), search services
(``adapters``: SearXNG, Tavily, Brave, one adapter each; ``providers`` sends their requests) and
summaries that keep their source (``summarize``).

It may import ``tether.tasks``, ``tether.errors``, ``tether.config``, ``tether.credentials`` and, for
a configured model, ``tether.models``; never execution, agents or interfaces. ``specs``, ``setup`` and
``adapters`` are light (no HTTP client, no parser); everything else loads only where a task runs.
"""
