"""Interfaces: how people and programs reach tether — the ``tether`` command and the web page.

Every interface reaches tasks and jobs only through the executor, with its caller's identity. May import
every layer below; nothing imports an interface. Inside, the command modules (``*_cli.py``) share
``base.py`` and are composed by ``cli.py``; ``client.py`` (the thin entry point) and ``zygote.py`` (the
CLI server) share ``handoff.py``; ``web/`` is the page's server, one router per area.
"""
