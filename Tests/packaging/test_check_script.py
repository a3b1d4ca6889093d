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
    """A copy of what the script checks under a fresh root: docker/ and helm/, and the
    documents and code that what the packaging says is checked against."""
    for d in ("docker", "helm", "docs", "Sources", "Tests/monitoring"):
        shutil.copytree(REPO / d, tmp_path / d)
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
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


def test_alert_that_no_longer_fires_fails(copy):
    # Tolerating 5 dead letters in 15 minutes: the unit test's one dead letter no longer alerts.
    break_line(copy / "helm" / "apns-relay" / "values.yaml", "deadLettersPer15m: 0", "deadLettersPer15m: 5")
    code, out = run(copy)
    assert code != 0
    assert "FAIL alert rules (all-on)" in out and "ApnsRelayDeadLetters" in out, out
    assert summary(out).endswith(" passed, 1 failed")


def test_alert_that_does_not_parse_fails(copy):
    break_line(copy / "helm" / "apns-relay" / "templates" / "prometheusrule.yaml",
               "[1h]) > {{ $rules.restartsPerHour }}", "[1 h]) > {{ $rules.restartsPerHour }}")
    code, out = run(copy)
    assert code != 0
    assert "FAIL alert rules (all-on)" in out, out
    assert summary(out).endswith(" passed, 1 failed")


def test_dashboard_query_of_every_job_fails(copy):
    # A panel whose query is not narrowed to the dashboard's job shows every application's series.
    break_line(copy / "helm" / "apns-relay" / "dashboards" / "apns-relay.json",
               'sum by (cause) (rate(apns_retries_total{job=\\"$job\\", namespace=~\\"$namespace\\", instance=~\\"$instance\\"}',
               'sum by (cause) (rate(apns_retries_total{}')
    code, out = run(copy)
    assert code != 0
    assert "FAIL Grafana dashboard (all-on)" in out and "'Retries by cause'" in out, out
    assert summary(out).endswith(" passed, 1 failed")


# What the packaging tells its readers, broken one way each: (file, text, replacement, the
# check that must fail, what it must say). The first three are what the packaging once said.
MISLEADING = {
    # docker/relay.yaml: a file on one machine, not in the repository.
    "pointer-outside": ("docker/relay.yaml", 'Every key and its default: README.md ("Configuration")',
                        'Every key and its default: ~/contract.md ("Configuration")',
                        "packaging documents point inside the repository",
                        "~/contract.md is outside the repository"),
    # docs/DEPLOY.md, while TopicSetup.ensure creates the missing topics.
    "no-topic-creation": ("docs/DEPLOY.md", "Create them yourself beforehand to choose",
                          "The relay does not create topics. Create them yourself beforehand to choose",
                          "packaging text matches the code", "says the relay does not create topics"),
    # values.yaml: /readyz checks no Kafka connection.
    "readiness-kafka": ("helm/apns-relay/values.yaml", "readiness: /readyz (200 once the device",
                        "readiness: /readyz (Kafka connected, the device",
                        "packaging text matches the code", "readiness means Kafka is connected"),
    # A new condition in the code that the chart's description of readiness does not know.
    "readiness-new-condition": ("Sources/apns-relay/RunCommand.swift",
                                'if !snapshot.devicesLoaded { missing.append("device registrations loading") }',
                                'if !snapshot.devicesLoaded { missing.append("device registrations loading") }\n'
                                '            if true { missing.append("results topic lagging") }',
                                "packaging text matches the code", "/readyz checks 'results topic lagging'"),
    # The docs build a tag the chart does not run.
    "image-reference": ("docs/DEPLOY.md", "docker build -f docker/Dockerfile -t apns-relay:0.1.0 .",
                        "docker build -f docker/Dockerfile -t apns-relay:latest .", "image reference",
                        "image apns-relay:latest, but the chart's default is apns-relay:0.1.0"),
}


@pytest.mark.parametrize("case", MISLEADING.values(), ids=MISLEADING.keys())
def test_misleading_packaging_text_fails(copy, case):
    path, old, new, check, message = case
    break_line(copy / path, old, new)
    code, out = run(copy)
    assert code != 0
    assert f"FAIL {check}" in out and message in out, out
    assert summary(out).endswith(" passed, 1 failed")
