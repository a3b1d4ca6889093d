"""The chart's dashboard and alerts against a real Prometheus scraping a running relay.

    python monitoring_check.py APNS_RELAY_BINARY RENDERED_CHART WORK_DIR

RENDERED_CHART is `helm template apns-relay helm/apns-relay --namespace push -f ci/all-on-values.yaml`
(release apns-relay in namespace push: the alerts select job="apns-relay", namespace="push"). Starts
`apns-relay simulator` (certificate auth, one token it refuses), `apns-relay run` on an embedded Kafka,
produces a few events with kcat (a delivery, a refused token, a malformed event), then Debian's
`prometheus` with the chart's rules, scraping the relay every second as job apns-relay with
namespace="push". Checks, one PASS/FAIL line each:

- every dashboard query names only series the relay exports, is valid PromQL and shows data;
- every alert expression names only series the relay exports, and Prometheus evaluates every rule
  without error;
- on this healthy relay no alert is pending or firing but the dead-letter one (one event was malformed).

Exits 1 when a check failed. Needs kcat and prometheus (scripts/install-deps.sh) and PyYAML.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

JOB = "apns-relay"
NAMESPACE = "push"
TOPIC = "com.example.app"
GOOD_TOKEN = "ab" * 32
BAD_TOKEN = "cd" * 32
# A metric named in a query: a name followed by its label matchers (every query selects by job).
METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
# Series Prometheus itself makes for each target.
PROMETHEUS_SERIES = {"up"}

PASSED = 0
FAILED = 0


def report(name, problems):
    global PASSED, FAILED
    if problems:
        FAILED += 1
        print(f"FAIL {name}")
        for problem in problems:
            print(f"    {problem}")
    else:
        PASSED += 1
        print(f"PASS {name}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


def wait_for(what, condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    print(f"    timed out after {seconds} s waiting for {what}")
    return False


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path, **params):
        status, body = get(f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}")
        data = json.loads(body)
        if data.get("status") != "success":
            raise ValueError(f"{path}: {data}")
        return data["data"]

    def query(self, expr):
        """(result, error): the instant query's result, or the error Prometheus gives."""
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                data = json.loads(response.read().decode())
        except urllib.error.HTTPError as e:
            data = json.loads(e.read().decode())
        if data.get("status") != "success":
            return None, data.get("error", "failed")
        return data["data"]["result"], None


def dashboard_and_rules(rendered):
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
    dashboard = next(json.loads(d["data"]["apns-relay.json"]) for d in docs
                     if d.get("kind") == "ConfigMap" and "grafana_dashboard" in (d["metadata"].get("labels") or {}))
    rules = next(d["spec"] for d in docs if d.get("kind") == "PrometheusRule")
    return dashboard, rules


def dashboard_queries(dashboard):
    """(panel title, expr) of every panel's query, Grafana's variables filled in as for one relay."""
    values = {"$job": JOB, "$namespace": ".*", "$instance": ".*", "$__rate_interval": "1m"}
    for panel in dashboard["panels"]:
        for target in panel.get("targets") or []:
            expr = target["expr"]
            for variable, value in values.items():
                expr = expr.replace(variable, value)
            yield panel["title"], expr


def start(args, log):
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process, seconds=30):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def main(binary, rendered, work):
    os.makedirs(work, exist_ok=True)
    dashboard, rules = dashboard_and_rules(rendered)
    with open(f"{work}/rules.yaml", "w") as f:
        yaml.safe_dump(rules, f, sort_keys=False)
    with open(f"{work}/bad-tokens.txt", "w") as f:
        f.write(BAD_TOKEN + "\n")
    processes = []
    try:
        # The simulator: per-app client certificates (so the relay exports its certificate's expiry).
        simulator_log = open(f"{work}/simulator.log", "w")
        simulator = subprocess.Popen(
            [binary, "simulator", "--http2-port", "0", "--cert-dir", f"{work}/certs", "--app-certificate", TOPIC,
             "--bad-tokens", f"{work}/bad-tokens.txt"],
            stdout=subprocess.PIPE, stderr=simulator_log, text=True, start_new_session=True)
        processes.append(simulator)
        banner = simulator.stdout.readline()
        apns_port = int(re.search(r"127\.0\.0\.1:(\d+) \(HTTP/2", banner).group(1))

        http_port = free_port()
        certs = f"{work}/certs"
        with open(f"{work}/relay.yaml", "w") as f:
            f.write(f"""kafka:
  brokers: embedded
apns:
  production_endpoint: 127.0.0.1:{apns_port}
  sandbox_endpoint: 127.0.0.1:{apns_port}
  ca_file: {certs}/ca.pem
  topic: {TOPIC}
  auth:
    cert_file: {certs}/client-{TOPIC}.pem
    private_key_file: {certs}/client-{TOPIC}.key
relay:
  http_port: {http_port}
  shutdown_timeout_s: 5
""")
        relay_log_path = f"{work}/relay.log"
        relay = start([binary, "run", "--config", f"{work}/relay.yaml"], open(relay_log_path, "w"))
        processes.append(relay)
        ready = wait_for("the relay's /readyz", lambda: get(f"http://127.0.0.1:{http_port}/readyz")[0] == 200, 90)
        report("the relay runs and is ready", [] if ready else [open(relay_log_path).read()[-3000:]])
        if not ready:
            return
        prometheus_port = free_port()
        with open(f"{work}/prometheus.yml", "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [f"{work}/rules.yaml"],
                "scrape_configs": [{"job_name": JOB, "static_configs": [
                    {"targets": [f"127.0.0.1:{http_port}"], "labels": {"namespace": NAMESPACE}}]}],
            }, f)
        prometheus = start(["prometheus", f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/tsdb",
                            f"--web.listen-address=127.0.0.1:{prometheus_port}", "--log.level=warn"],
                           open(f"{work}/prometheus.log", "w"))
        processes.append(prometheus)
        server = Prometheus(prometheus_port)

        up = wait_for("Prometheus's first scrape of the relay", lambda: server.query(f'up{{job="{JOB}"}} == 1')[0], 60)
        report("Prometheus scrapes the relay as job apns-relay", [] if up else [open(f"{work}/prometheus.log").read()[-2000:]])
        if not up:
            return
        # Events only now: a counter's increase needs a sample from before it moved.
        bootstrap = re.search(r"bootstrap=(\S+)", open(relay_log_path).read()).group(1)
        events = [
            f'e-1|{{"id":"e-1","tokens":["{GOOD_TOKEN}"],"apns":{{"payload":{{"aps":{{"alert":"hi"}}}}}}}}',
            f'e-2|{{"id":"e-2","tokens":["{BAD_TOKEN}"],"apns":{{"payload":{{"aps":{{"alert":"hi"}}}}}}}}',
            "bad-1|{broken",
        ]
        subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", "push.events", "-K", "|"], input="\n".join(events) + "\n",
                       text=True, check=True, timeout=60)

        def scraped():
            result, _ = server.query(f'apns_relay_notifications_total{{job="{JOB}",status="rejected"}} > 0')
            lag, _ = server.query(f'apns_relay_consumer_lag{{job="{JOB}"}}')
            return bool(result) and bool(lag)
        seen = wait_for("Prometheus to scrape the relay's answers and consumer lag", scraped, 90)
        report("the relay's answers and consumer lag reach Prometheus", [] if seen else [open(f"{work}/prometheus.log").read()[-2000:]])
        if not seen:
            return
        time.sleep(5)  # rate() over [1m] wants a few samples after the traffic

        exported = set(server.api("label/__name__/values", **{"match[]": f'{{job="{JOB}"}}'}))
        print(f"    the relay exports {len(exported)} series names")

        problems = []
        for title, expr in dashboard_queries(dashboard):
            for name in METRIC.findall(expr):
                if name not in exported and name not in PROMETHEUS_SERIES:
                    problems.append(f"panel {title!r}: {name} is not a series the relay exports ({expr})")
            result, error = server.query(expr)
            if error:
                problems.append(f"panel {title!r}: {error} ({expr})")
            elif not result:
                problems.append(f"panel {title!r}: no data ({expr})")
        report(f"every dashboard query ({sum(1 for _ in dashboard_queries(dashboard))}) names exported series and shows data", problems)

        problems = []
        for group in rules["groups"]:
            for rule in group["rules"]:
                for name in METRIC.findall(rule["expr"]):
                    if name not in exported and name not in PROMETHEUS_SERIES:
                        problems.append(f"{rule['alert']}: {name} is not a series the relay exports")
                _, error = server.query(rule["expr"])
                if error:
                    problems.append(f"{rule['alert']}: {error}")
        evaluated = lambda: all(r.get("lastEvaluation", "").startswith("2") and r.get("health") != "unknown"
                                for g in server.api("rules")["groups"] for r in g["rules"])
        wait_for("every rule evaluated", evaluated, 30)
        loaded = [r for g in server.api("rules")["groups"] for r in g["rules"]]
        expected = sum(len(g["rules"]) for g in rules["groups"])
        if len(loaded) != expected:
            problems.append(f"Prometheus loaded {len(loaded)} rules, the chart has {expected}")
        problems += [f"{r['name']}: health {r.get('health')} {r.get('lastError', '')}" for r in loaded if r.get("health") != "ok"]
        report(f"every alert ({expected}) names exported series; Prometheus evaluates each without error", problems)

        def active():
            return {(a["labels"]["alertname"], a["state"]) for a in server.api("alerts")["alerts"]}
        wait_for("ApnsRelayDeadLetters to go pending", lambda: any(name == "ApnsRelayDeadLetters" for name, _ in active()), 30)
        active = active()
        others = {name for name, _ in active} - {"ApnsRelayDeadLetters"}
        problems = [f"{name} is active on a healthy relay" for name in sorted(others)]
        if not any(name == "ApnsRelayDeadLetters" for name, _ in active):
            problems.append("ApnsRelayDeadLetters is not pending after a malformed event")
        report("on the healthy relay only ApnsRelayDeadLetters is active (one malformed event)", problems)

        code = stop(relay)
        report("the relay stops with exit 0", [] if code == 0 else [f"exit {code}", open(relay_log_path).read()[-2000:]])
    finally:
        for process in reversed(processes):
            stop(process)
    return


if __name__ == "__main__":
    main(*sys.argv[1:4])
    print(f"{PASSED} passed, {FAILED} failed")
    sys.exit(1 if FAILED else 0)
