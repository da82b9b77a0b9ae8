"""A module that starts a thread when it is imported (as some libraries do): unsafe to fork after."""

import threading
import time

threading.Thread(target=time.sleep, args=(3600,), daemon=True, name="started-at-import").start()
