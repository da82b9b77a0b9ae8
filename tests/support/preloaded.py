"""A module a test registry asks the fork server to preload: it records the process that imported it."""

import os

LOADED_IN = os.getpid()
