"""serve-replay and validate default to the shipped DSpark drafter and its acceptance profile."""
from __future__ import annotations

import typer

from dspark_sim.cli import app
from dspark_sim.decode.drafters.trained import shipped_dir
from dspark_sim.serve.inputs import default_engine_acceptance


def _option(command: str, name: str):
    cmd = typer.main.get_command(app).commands[command]
    return next(p for p in cmd.params if p.name == name)


def test_serve_commands_default_to_the_shipped_dspark_drafter():
    for command in ("serve-replay", "validate"):
        opt = _option(command, "drafter")
        assert opt.default == "dspark"
        assert "Default: dspark" in opt.help
    assert (shipped_dir("dspark") / "config.json").is_file()
    assert default_engine_acceptance("dspark", 0.0) == "smollm2-135m-dspark-g7-t0"
    assert default_engine_acceptance("dspark", 1.0) == "smollm2-135m-dspark-g7-t1"
