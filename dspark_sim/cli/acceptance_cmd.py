"""`dspark-sim acceptance import vllm`: acceptance profiles from what vLLM measured."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError
from .render import print_acceptance_report


def register(app: typer.Typer) -> None:
    acceptance = typer.Typer(help="Acceptance profiles (formats.md) from serving engines.",
                             no_args_is_help=True)
    import_app = typer.Typer(help="Import an engine's acceptance measurements as a profile.",
                             no_args_is_help=True)

    @import_app.command("vllm")
    def vllm(
        files: list[Path] = typer.Argument(..., metavar="FILE...", help="vLLM /metrics scrapes "
                                           "(Prometheus text; summed) or JSON Lines of per-request "
                                           "records (vLLM responses or AIPerf profile_export.jsonl)."),
        out: Path = typer.Option(..., "--out", help="Acceptance profile JSON to write (atomically)."),
        name: Optional[str] = typer.Option(None, "--name", help="Profile name (default: the "
                                           "--out file name without .acceptance.json)."),
        task: Optional[str] = typer.Option(None, "--task", help="One task name for every request "
                                           "(and the task of a Prometheus import; default 'default')."),
        task_map: Optional[Path] = typer.Option(None, "--task-map", help="JSON object key -> task; "
                                                "the key is --task-field, else metadata.conversation_id "
                                                "(AIPerf) or id (vLLM response)."),
        task_field: Optional[str] = typer.Option(None, "--task-field", help="Dotted path of the "
                                                 "record field holding the task (default: 'task' "
                                                 "if present, else 'default')."),
        kind: str = typer.Option("auto", "--kind", help="auto (scrapes -> parametric, records -> "
                                 "empirical), empirical, or parametric (per-position rates)."),
        before: Optional[list[Path]] = typer.Option(None, "--before", help="Scrape taken before the "
                                                    "run, subtracted from FILE (once per FILE, in order)."),
        model_name: Optional[str] = typer.Option(None, "--model-name", help="The model_name label "
                                                 "to read when a scrape has several models."),
        drafter_kind: str = typer.Option("", "--drafter-kind", help="drafter_kind of the profile "
                                         "(picks draft_time in a hardware profile; e.g. ngram)."),
    ) -> None:
        """Per-position acceptance (with 95% CIs) from vLLM scrapes, or per-request step records
        from vLLM's detailed spec-decode metrics, written as an acceptance profile."""
        from ..profiles.acceptance import AcceptanceProfile
        from ..vllm.acceptance_import import import_vllm
        from ..vllm.records import TaskRule, load_task_map

        if task is not None and (task_map is not None or task_field is not None):
            raise InputError("give --task, or --task-map / --task-field, not both", field="task")
        for value, option in ((task, "task"), (task_field, "task-field"), (name, "name")):
            if value is not None and not value:
                raise InputError("must be a non-empty string", field=option)
        rule = TaskRule(name=task, path=task_field,
                        mapping=load_task_map(task_map) if task_map is not None else None,
                        map_file=str(task_map) if task_map is not None else None)
        profile_name = name or out.name.removesuffix(".json").removesuffix(".acceptance")
        result = import_vllm(files, profile_name, kind, rule, before, model_name, drafter_kind)
        AcceptanceProfile.from_dict(result.profile.to_dict())   # the file will load back
        print_acceptance_report(result)
        result.profile.save(out)
        kinds = sorted({t.kind for t in result.profile.tasks.values()})
        typer.echo(f"wrote {out} ({'/'.join(kinds)}, gamma={result.profile.gamma}, "
                   f"tasks={','.join(result.profile.tasks)})")

    acceptance.add_typer(import_app, name="import")
    app.add_typer(acceptance, name="acceptance")

