import itertools

import pytest

from tether.tasks.result import TERMINAL, TaskResult, TaskStatus

S = TaskStatus


def test_terminal_states_never_change() -> None:
    for terminal, other in itertools.product(TERMINAL, TaskStatus):
        assert terminal.can_become(other) is (other is terminal)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.PENDING, S.RUNNING),
        (S.PENDING, S.REJECTED),
        (S.PENDING, S.NOT_FOUND),
        (S.PENDING, S.FAILED),
        (S.RUNNING, S.COMPLETED),
        (S.RUNNING, S.FAILED),
        (S.RUNNING, S.STOPPED),
    ],
)
def test_allowed_transitions(old: TaskStatus, new: TaskStatus) -> None:
    assert old.can_become(new)


@pytest.mark.parametrize(
    ("old", "new"),
    [(S.RUNNING, S.PENDING), (S.RUNNING, S.REJECTED), (S.RUNNING, S.NOT_FOUND), (S.PENDING, S.COMPLETED)],
)
def test_forbidden_transitions(old: TaskStatus, new: TaskStatus) -> None:
    assert not old.can_become(new)


def test_result_is_structured_and_frozen() -> None:
    result = TaskResult(task_id="a.b", execution_id="x", status=S.COMPLETED, message="ok")
    assert result.model_dump() == {
        "task_id": "a.b",
        "execution_id": "x",
        "status": S.COMPLETED,
        "message": "ok",
        "duration_seconds": 0.0,
        "data": {},
    }
    with pytest.raises(ValueError, match="frozen"):
        result.message = "changed"  # type: ignore[misc]
    assert result.ok and not result.model_copy(update={"status": S.FAILED}).ok


def test_an_unobserved_running_state_may_be_skipped_but_never_a_terminal_one() -> None:
    assert S.PENDING.can_reach(S.COMPLETED) and not S.PENDING.can_become(S.COMPLETED)
    assert not S.COMPLETED.can_reach(S.STOPPED)
    assert not S.RUNNING.can_reach(S.PENDING)
