"""A home keeps its node name: a host renamed keeps its jobs, and a home found on another machine is
named anew.

Before it, a home with no ``[cluster] node`` was named by its host's name at each start: rename the host
and the jobs recorded under the old name became another node's — nobody would settle, stop or prune
them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tether import installation
from tether.installation import node_name
from tether.runtime import Runtime


def test_a_renamed_host_keeps_the_name_its_home_was_first_known_by(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = node_name(home)
    assert first == socket.gethostname()
    monkeypatch.setattr(installation.socket, "gethostname", lambda: "renamed-host")
    assert node_name(home) == first
    with Runtime.open(home) as runtime:  # what its jobs are recorded under
        assert runtime.installation.host == first


def test_a_configured_name_is_used_as_given_and_the_home_keeps_its_own(home: Path) -> None:
    own = node_name(home)
    assert node_name(home, "lab-pc-1-phone") == "lab-pc-1-phone"  # tether worker --name, a service's
    assert node_name(home) == own  # the home's commands are still its first name's


def test_a_home_found_on_another_machine_is_named_from_its_host(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_name(home)
    monkeypatch.setattr(installation, "_machine_id", lambda: "f" * 32)  # copied, or a clone's new id
    monkeypatch.setattr(installation.socket, "gethostname", lambda: "the-copy")
    assert node_name(home) == "the-copy"


def test_a_damaged_name_file_falls_back_to_the_host_named_as_a_node_may_be(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / installation.NODE_FILE).write_text("not a name!\n")
    monkeypatch.setattr(installation.socket, "gethostname", lambda: "host b!")
    assert node_name(home) == "host-b-"
    assert (home / installation.NODE_FILE).read_text().splitlines()[0] == "host-b-"
