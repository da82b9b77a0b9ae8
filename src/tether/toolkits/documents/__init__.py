"""The ``documents`` toolkit: ``documents.generate`` turns Markdown into md/html/pptx/pdf files.

``specs`` is light (pydantic only) and is what registries import; ``handlers`` runs in the worker and
is the only place ``tether.artifacts`` builders (python-pptx, WeasyPrint) are loaded.
"""
