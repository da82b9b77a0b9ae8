"""The registry a home uses by default (``tether.toolkits.standard:registry``): every toolkit tether
ships, composed from each toolkit's ``add_tasks``.

- ``demo``: the game-automation example the tour drives;
- ``documents``: md, html, pptx and pdf files from Markdown (``tether.artifacts``);
- ``web``: search (when a provider is set up), reading a URL behind the SSRF guard, summarizing;
- ``workspace``: the person's files, confined to the configured roots;
- ``shell``: commands the person allow-listed (absent until one is);
- ``skills``: reading an installed skill's instructions;
- ``mcp``: tools of the MCP servers a home configures (``mcp.<server>.<tool>``, added per home by
  ``Registry.for_home``), and ``mcp.refresh``, which lists a server's tools.

Only task specs are imported here; every handler module loads inside its worker.
"""

from __future__ import annotations

from tether.tasks.spec import Registry
from tether.toolkits.demo import registry as demo
from tether.toolkits.documents import specs as documents
from tether.toolkits.mcp import specs as mcp
from tether.toolkits.shell import specs as shell
from tether.toolkits.skills import specs as skills
from tether.toolkits.web import specs as web
from tether.toolkits.workspace import specs as workspace

# Warmed by the fork server while it is idle: a page read, a deck or an imported MCP tool then starts with
# its libraries loaded (about 0.3 s for trafilatura and httpx, 0.7 s for WeasyPrint, 0.15 s for
# jsonschema) instead of importing them per worker.
PRELOAD = (
    *web.PRELOAD,
    "tether.toolkits.workspace.handlers",
    "tether.toolkits.workspace.readers",
    "pypdf",
    "tether.toolkits.documents.handlers",
    "tether.artifacts.pptx",
    "tether.artifacts.pdf",
    "weasyprint",
    *mcp.PRELOAD,
)

registry = Registry(
    ref="tether.toolkits.standard:registry",
    env=demo.ENV,
    preload=PRELOAD,
    homes=(mcp.HOME_TASKS,),
    home_files=mcp.HOME_FILES,
)
for toolkit in (demo, documents, web, workspace, shell, skills, mcp):
    toolkit.add_tasks(registry)
