"""The test suite's own keyring backend: keys in a JSON file named by ``TETHER_TEST_KEYRING``, so a
``tether auth`` subprocess and the test share them. Never installed outside the tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError

FILE_ENV = "TETHER_TEST_KEYRING"


class TestKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    def _path(self) -> Path:
        return Path(os.environ[FILE_ENV])

    def _load(self) -> dict[str, str]:
        try:
            return json.loads(self._path().read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}\x00{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        keys = self._load()
        keys[f"{service}\x00{username}"] = password
        self._path().write_text(json.dumps(keys), encoding="utf-8")

    def delete_password(self, service: str, username: str) -> None:
        keys = self._load()
        if keys.pop(f"{service}\x00{username}", None) is None:
            raise PasswordDeleteError(username)
        self._path().write_text(json.dumps(keys), encoding="utf-8")
