"""``tether flow validate FILE`` and ``tether flow plan GOAL``: plans checked before anything runs.

``validate`` loads a flow file and lists every problem (exit 2) or says it can run (exit 0); ``plan``
turns a goal into a plan with the offline model and prints it as a flow file (``-o FILE`` writes it),
so a person can read, edit and keep it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tether.interfaces.render import out

flow_app = typer.Typer(
    help="Plans as DAGs of tasks: check flow files, turn goals into plans.", no_args_is_help=True
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")]


def register(app: typer.Typer, state: Any) -> None:
    app.add_typer(flow_app, name="flow")

    def guarded(as_json: bool, body: Any) -> None:
        from tether.interfaces.cli import _guard

        _guard(as_json, body)

    def registry() -> Any:
        from tether.interfaces.cli import load_registry

        return load_registry(state.registry_ref)

    @flow_app.command("validate")
    def validate_command(
        path: Annotated[Path, typer.Argument(help="A flow file (YAML or JSON)")], as_json: JsonFlag = False
    ) -> None:
        """Check a flow file against the registry: every problem, each named."""

        def body() -> int:
            from tether.errors import PlanError
            from tether.supervisor import flowfile

            try:
                plan = flowfile.load(path, registry())
            except PlanError as exc:
                if as_json:
                    print(
                        json.dumps(
                            {"valid": False, "problems": exc.data.get("problems", []), "error": exc.message},
                            ensure_ascii=False,
                        )
                    )
                else:
                    from tether.interfaces.cli import print_error

                    problems = exc.data.get("problems") or []
                    print_error(
                        exc.message if not problems else f"{path}: {len(problems)} problem(s)",
                        as_json=False,
                        code="plan",
                    )
                    for problem in problems:
                        task = f"{problem['task']}: " if problem.get("task") else ""
                        out.print(f"  - {task}{problem['problem']}", markup=False, soft_wrap=True)
                return 2
            if as_json:
                print(json.dumps({"valid": True, "tasks": len(plan.tasks)}))
            else:
                out.print(f"{path}: ok, {len(plan.tasks)} task(s) can run", markup=False)
            return 0

        guarded(as_json, body)

    @flow_app.command("plan")
    def plan_command(
        goal: Annotated[str, typer.Argument(help="The goal, in plain words (中文 or English)")],
        output: Annotated[
            Path | None, typer.Option("-o", "--output", help="Write the flow file here")
        ] = None,
        as_json: JsonFlag = False,
    ) -> None:
        """Turn a goal into a plan (offline model) and print it as a flow file."""

        def body() -> int:
            import yaml

            from tether.supervisor.goals import plan_offline

            plan = plan_offline(goal, registry())
            document = plan.model_dump(mode="json", exclude_defaults=True)
            if as_json:
                print(json.dumps(document, ensure_ascii=False))
            text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False)
            if output is not None:
                output.write_text(text, encoding="utf-8")
                if not as_json:
                    out.print(
                        f"wrote {output} ({len(plan.tasks)} tasks); check it: tether flow validate {output}",
                        markup=False,
                    )
            elif not as_json:
                print(text, end="")
            return 0

        guarded(as_json, body)
