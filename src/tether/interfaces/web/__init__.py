"""The web app of ``tether serve``: the HTTP API (``app.py``), its guard (``security.py``), the live
event stream (``stream.py``), the server (``server.py``) and the page (``static/``)."""
