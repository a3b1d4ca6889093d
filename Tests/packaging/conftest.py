"""Shared helpers of the packaging tests (run by scripts/check-packaging.sh with the
.tools venv: `.tools/venv/bin/pytest Tests/packaging`)."""

import os
import pathlib
import subprocess

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
HELM = os.environ.get("HELM", str(REPO / ".tools" / "bin" / "helm"))
CHART = pathlib.Path(os.environ.get("CHART_DIR", REPO / "helm" / "apns-relay"))


def helm_template(*args, check=True):
    """Renders the chart (release "r", namespace "push"); returns the completed process."""
    if not os.access(HELM, os.X_OK):
        pytest.fail(f"helm not found at {HELM}: run scripts/check-packaging.sh once to install it")
    env = dict(os.environ, KUBECONFIG=os.devnull)
    proc = subprocess.run(
        [HELM, "template", "r", str(CHART), "--namespace", "push", *args],
        capture_output=True, text=True, env=env,
    )
    if check and proc.returncode != 0:
        pytest.fail(f"helm template {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def render(*args):
    """Rendered objects keyed by (kind, name)."""
    docs = [d for d in yaml.safe_load_all(helm_template(*args).stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}
