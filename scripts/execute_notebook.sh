#!/usr/bin/env bash
# Re-run notebooks/what_if.ipynb at the CI size from a temporary directory (as the test suite
# does) and store it with its outputs. Usage: scripts/execute_notebook.sh [small|full]
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp notebooks/what_if.ipynb "$WORK/"
cd "$WORK"
MPLBACKEND=Agg WHAT_IF_SIZE=${1:-small} "$REPO/.venv/bin/python" - <<'PY'
import nbformat
from nbclient import NotebookClient

nb = nbformat.read("what_if.ipynb", as_version=4)
NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": "."}}).execute()
nbformat.write(nb, "what_if.ipynb")
PY
cp "$WORK/what_if.ipynb" "$REPO/notebooks/what_if.ipynb"
echo "wrote notebooks/what_if.ipynb (outputs from a ${1:-small} run)"
