"""scripts/check-packaging.sh fails on a broken Dockerfile or chart (on a copy)."""

import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check-packaging.sh"


@pytest.fixture
def copy(tmp_path):
    """A copy of what the script checks: docker/ and helm/ under a fresh root."""
    for d in ("docker", "helm"):
        shutil.copytree(REPO / d, tmp_path / d)
    return tmp_path


def run(root):
    # CHECK_TESTS=0: the copy has no Tests/, and this test must not recurse.
    # The paths come from ROOT alone, not from an outer run's environment.
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKERFILE", "COMPOSE_FILE", "CHART_DIR")}
    env["CHECK_TESTS"] = "0"
    proc = subprocess.run(["bash", str(SCRIPT), str(root)], capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def break_line(path, old, new):
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found exactly once in {path}"
    path.write_text(text.replace(old, new))


def summary(out):
    return out.strip().splitlines()[-1]


def test_unbroken_copy_passes(copy):
    code, out = run(copy)
    assert code == 0, out
    assert summary(out).endswith(" passed, 0 failed")


def test_broken_dockerfile_fails(copy):
    # `cd` in a RUN instead of WORKDIR: hadolint DL3003, a warning.
    break_line(copy / "docker" / "Dockerfile",
               "RUN ln -s /usr/local/lib/apns-relay/apns-relay /usr/local/bin/apns-relay",
               "RUN cd /usr/local/bin && ln -s ../lib/apns-relay/apns-relay apns-relay")
    code, out = run(copy)
    assert code != 0
    assert "FAIL hadolint" in out and "DL3003" in out
    assert summary(out).endswith(" passed, 1 failed")


def test_broken_template_fails(copy):
    # A quoted port: still renders and lints, but is not a valid Deployment.
    break_line(copy / "helm" / "apns-relay" / "templates" / "deployment.yaml",
               "containerPort: {{ $port }}", 'containerPort: "{{ $port }}"')
    code, out = run(copy)
    assert code != 0
    assert "FAIL kubernetes-validate --strict (default" in out
    assert "is not of type 'integer'" in out
    assert not summary(out).endswith(" 0 failed")


def test_broken_compose_wiring_fails(copy):
    # Pointing the relay at the simulator's service name: its listener is on loopback.
    # (The leading spaces tell apns.endpoint from apns.production_endpoint, which has the same value.)
    break_line(copy / "docker" / "relay.yaml", "\n  endpoint: 127.0.0.1:2197", "\n  endpoint: simulator:2197")
    code, out = run(copy)
    assert code != 0
    assert "FAIL compose stack wiring" in out
    assert "apns.endpoint must be 127.0.0.1:2197" in out
    assert summary(out).endswith(" passed, 1 failed")
