"""`dspark-sim profiles`: list and check hardware and acceptance profiles."""
from __future__ import annotations

from pathlib import Path

import typer


def _short(text: str, width: int = 110) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _describe(name: str) -> str:
    """One line: kind, target, drafter, temperature, gamma, tau per task (all drafts verified),
    source."""
    from ..profiles.registry import acceptance_profile_path, load_acceptance_profile

    path = acceptance_profile_path(name)
    prof = load_acceptance_profile(path)
    kind = "measured" if any(t.kind == "empirical" for t in prof.tasks.values()) else "parametric"
    taus = " ".join(f"{task} {t.mean_tau(prof.gamma):.2f}" for task, t in prof.tasks.items())
    report = path.with_name(f"{prof.name}.report.md")
    source = (prof.extra.get("source_url") or prof.extra.get("source")
              or (f"measured here ({report.name})" if report.exists() else "not stated"))
    return _short(f"{prof.drafter_kind or '?'} {kind}, gamma {prof.gamma}, T={prof.temperature:g}; "
                  f"tau {taus}; target {prof.target or '?'}; drafter {prof.drafter or '?'}; "
                  f"source: {source}", 220)


def register(app: typer.Typer) -> None:
    profiles = typer.Typer(help="List the shipped profiles and check profile files.",
                           no_args_is_help=True)

    @profiles.command("list")
    def list_profiles() -> None:
        """List the hardware and acceptance profiles shipped with dspark-sim; each acceptance
        profile with its kind, target, drafter, temperature, tau per task and source."""
        from ..profiles import shipped_acceptance_names, shipped_hw_names

        typer.echo("hardware profiles (hw_profiles/):")
        for name in shipped_hw_names():
            typer.echo(f"  {name}")
        typer.echo("acceptance profiles (dspark_sim/data/acceptance/):")
        for name in shipped_acceptance_names():
            typer.echo(f"  {name}")
            typer.echo(f"      {_describe(name)}")

    @profiles.command("check")
    def check(paths: list[Path] = typer.Argument(..., help="Profile files (.yaml hardware, "
                                                          ".json acceptance) or shipped names.")) -> None:
        """Validate profile files; exits 2 naming FILE:LINE and the field on the first error."""
        from ..profiles.registry import (acceptance_profile_path, hw_profile_path,
                                         load_acceptance_profile, load_hw_profile)
        from ..errors import InputError

        for path in paths:
            text = str(path)
            try:
                hw_path = hw_profile_path(text)
            except InputError:
                hw_path = None
            if hw_path is not None and hw_path.suffix in (".yaml", ".yml"):
                prof = load_hw_profile(hw_path)
                typer.echo(f"{hw_path}: hardware profile '{prof.name}' ({prof.source}) OK")
            else:
                acc = load_acceptance_profile(acceptance_profile_path(text))
                typer.echo(f"{text}: acceptance profile '{acc.name}' gamma={acc.gamma} "
                           f"tasks={','.join(acc.tasks)} OK")

    @profiles.command("show")
    def show(paths: list[Path] = typer.Argument(..., help="Profiles to describe: shipped names or "
                                                       "files (.yaml hardware, .json acceptance).")) -> None:
        """Describe profiles: an acceptance profile's per-task acceptance and, where `measure`
        recorded it, the confidence calibration per position (ECE, samples, interval); a
        hardware profile's model, device and step-time curve."""
        from ..errors import InputError
        from ..profiles.describe import describe_acceptance, describe_hardware
        from ..profiles.registry import (acceptance_profile_path, hw_profile_path,
                                         load_acceptance_profile, load_hw_profile)

        for path in paths:
            try:
                hw_path = hw_profile_path(str(path))
            except InputError:
                hw_path = None
            if hw_path is not None and hw_path.suffix in (".yaml", ".yml"):
                lines = describe_hardware(load_hw_profile(hw_path))
            else:
                lines = describe_acceptance(load_acceptance_profile(acceptance_profile_path(str(path))))
            typer.echo("\n".join(lines))

    app.add_typer(profiles, name="profiles")
