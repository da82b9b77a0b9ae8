"""A simulated automation target that exercises every contract of the execution core.

``game.py`` is a real "game" process keeping its state in the tether home; ``handlers.py`` holds the
tasks around it; ``registry.py`` declares them (``tether.toolkits.demo.registry:registry``).
"""
