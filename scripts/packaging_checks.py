"""Checks of scripts/check-packaging.sh that no off-the-shelf offline tool does.

    python packaging_checks.py split-crds RENDERED BUILTIN_OUT CRD_OUT
    python packaging_checks.py check-crds CRD_FILE
    python packaging_checks.py check-compose COMPOSE_FILE [RELAY_YAML]
    python packaging_checks.py check-references REPO_ROOT FILE...
    python packaging_checks.py check-claims REPO_ROOT VALUES_YAML FILE...
    python packaging_checks.py check-image-ref RENDERED CHART_DIR BUILT_REF FILE...   (BUILT_REF "-": not known)
    python packaging_checks.py pod-spec RENDERED RELAY_YAML_OUT   (for scripts/image-check.sh)
    python packaging_checks.py extract-rules RENDERED RULES_OUT   (the PrometheusRule's groups, for promtool)
    python packaging_checks.py check-dashboard RENDERED

Each prints what is wrong, one line each, and exits 1 if anything is.
Runs with the PyYAML of the .tools venv.
"""

import json
import os
import re
import sys

import yaml

# API groups whose kinds have no schema in kubernetes-validate (CRDs).
CRD_GROUPS = ("monitoring.coreos.com/", "keda.sh/")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def split_crds(src, builtin_out, crd_out):
    """Splits a rendered chart into built-in kinds and custom resources."""
    builtin, crds = [], []
    for doc in load_all(src):
        (crds if doc.get("apiVersion", "").startswith(CRD_GROUPS) else builtin).append(doc)
    with open(builtin_out, "w") as f:
        yaml.safe_dump_all(builtin, f, sort_keys=False)
    with open(crd_out, "w") as f:
        yaml.safe_dump_all(crds, f, sort_keys=False)
    print(f"{len(builtin)} built-in objects, {len(crds)} custom resources")
    return []


def check_crds(path):
    """The fields of ServiceMonitor / ScaledObject / TriggerAuthentication that the
    operators need, checked by hand since no schema is available offline."""
    bad = []
    for d in load_all(path):
        kind, api = d.get("kind"), d.get("apiVersion")
        if not (d.get("metadata") or {}).get("name"):
            bad.append(f"{kind}: metadata.name missing")
        spec = d.get("spec") or {}
        if kind == "ServiceMonitor":
            if api != "monitoring.coreos.com/v1":
                bad.append(f"ServiceMonitor: apiVersion {api}")
            if not (spec.get("selector") or {}).get("matchLabels"):
                bad.append("ServiceMonitor: spec.selector.matchLabels missing")
            eps = spec.get("endpoints") or []
            if not eps or any(not e.get("port") or e.get("path") != "/metrics" for e in eps):
                bad.append("ServiceMonitor: every endpoint needs a port and path /metrics")
        elif kind == "ScaledObject":
            if api != "keda.sh/v1alpha1":
                bad.append(f"ScaledObject: apiVersion {api}")
            ref = spec.get("scaleTargetRef") or {}
            if ref.get("kind", "Deployment") != "Deployment" or not ref.get("name"):
                bad.append("ScaledObject: scaleTargetRef must name a Deployment")
            triggers = [t for t in spec.get("triggers") or [] if t.get("type") == "kafka"]
            if not triggers:
                bad.append("ScaledObject: no kafka trigger")
            for t in triggers:
                meta = t.get("metadata") or {}
                for k in ("bootstrapServers", "consumerGroup", "topic", "lagThreshold"):
                    if not meta.get(k):
                        bad.append(f"ScaledObject: kafka trigger metadata.{k} missing")
                for k, v in meta.items():
                    if not isinstance(v, str):
                        bad.append(f"ScaledObject: trigger metadata.{k} must be a string, is {v!r}")
            lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
            if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
                bad.append(f"ScaledObject: replica counts {lo}..{hi}")
        elif kind == "PrometheusRule":
            if api != "monitoring.coreos.com/v1":
                bad.append(f"PrometheusRule: apiVersion {api}")
            groups = spec.get("groups") or []
            if not groups:
                bad.append("PrometheusRule: spec.groups empty")
            for group in groups:
                for rule in group.get("rules") or []:
                    name = rule.get("alert") or rule.get("record") or "?"
                    if not rule.get("expr"):
                        bad.append(f"PrometheusRule: rule {name} has no expr")
                    if rule.get("alert") and not ((rule.get("labels") or {}).get("severity")
                                                  and (rule.get("annotations") or {}).get("summary")):
                        bad.append(f"PrometheusRule: alert {name} needs labels.severity and annotations.summary")
        elif kind == "TriggerAuthentication":
            if api != "keda.sh/v1alpha1":
                bad.append(f"TriggerAuthentication: apiVersion {api}")
            for ref in spec.get("secretTargetRef") or []:
                if not all(ref.get(k) for k in ("parameter", "name", "key")):
                    bad.append(f"TriggerAuthentication: incomplete secretTargetRef {ref}")
        else:
            bad.append(f"unexpected custom resource {api}/{kind}")
    return bad


TOPICS = {  # topic -> compacted?
    "push.events": False,
    "push.devices": True,
    "push.results": False,
    "push.failed-tokens": False,
    "push.dlq": False,
    "push.wrong-environment": False,
    "push.badge-state": True,
}


def check_compose(path, relay_yaml=None):
    """What `docker compose config` would catch plus the stack's own invariants;
    there is no compose engine or plugin in CI."""
    bad = []
    with open(path) as f:
        doc = yaml.safe_load(f)
    services = doc.get("services") or {}
    volumes = set((doc.get("volumes") or {}).keys())
    for name, svc in services.items():
        if not (svc.get("image") or svc.get("build")):
            bad.append(f"{name}: neither image nor build")
        deps = svc.get("depends_on") or {}
        for dep, cond in (deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps)):
            if dep not in services:
                bad.append(f"{name}: depends_on unknown service {dep}")
            c = (cond or {}).get("condition", "service_started")
            if c not in ("service_started", "service_healthy", "service_completed_successfully"):
                bad.append(f"{name}: depends_on {dep} has unknown condition {c}")
            if c == "service_healthy" and "healthcheck" not in services.get(dep, {}):
                bad.append(f"{name}: waits for {dep} to be healthy, but {dep} has no healthcheck")
        for v in svc.get("volumes") or []:
            src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
            if src and not src.startswith((".", "/", "~")) and src not in volumes:
                bad.append(f"{name}: volume {src} not declared under volumes:")
        nm = svc.get("network_mode", "")
        if nm.startswith("service:"):
            if nm[len("service:"):] not in services:
                bad.append(f"{name}: network_mode names unknown service {nm}")
            if svc.get("ports") or svc.get("networks") or svc.get("hostname"):
                bad.append(f"{name}: ports/networks/hostname cannot be combined with network_mode {nm}")
    relay = services.get("relay") or {}
    if relay.get("network_mode") != "service:simulator":
        bad.append('relay: must run in the simulator\'s namespace (network_mode: "service:simulator")')
    sim_ports = [str(p) for p in (services.get("simulator") or {}).get("ports") or []]
    if not any(p.endswith(":9090") for p in sim_ports):
        bad.append("simulator: must publish the relay's port 9090 (the relay shares its namespace)")
    cmd = relay.get("command") or []
    if cmd[:1] != ["run"] or "--config" not in cmd:
        bad.append("relay: command must be run --config FILE")
    grace = str(relay.get("stop_grace_period", "10s"))
    m = re.fullmatch(r"(\d+)s", grace)
    if not m or int(m.group(1)) <= 25:
        bad.append(f"relay: stop_grace_period {grace} must exceed relay.shutdown_timeout_s (25s)")

    # Topics: every one created, badge-state partitions == events partitions.
    init = services.get("kafka-init") or {}
    script = "\n".join(init.get("command") or [])
    parts = {}
    for line in script.splitlines():
        m = re.search(r"--topic\s+(\S+)\s+--partitions\s+(\d+)(.*)", line)
        if m:
            parts[m.group(1)] = (int(m.group(2)), "cleanup.policy=compact" in m.group(3))
    for topic, compacted in TOPICS.items():
        if topic not in parts:
            bad.append(f"kafka-init: topic {topic} not created")
        elif parts[topic][1] != compacted:
            bad.append(f"kafka-init: {topic} must {'' if compacted else 'not '}be compacted")
    if "push.events" in parts and parts["push.events"][0] != 6:
        bad.append("kafka-init: push.events must have 6 partitions")
    if parts.get("push.badge-state", (0,))[0] != parts.get("push.events", (-1,))[0]:
        bad.append("kafka-init: push.badge-state must have the partition count of push.events")

    if relay_yaml:
        with open(relay_yaml) as f:
            cfg = yaml.safe_load(f)
        apns = cfg.get("apns") or {}
        if not str((cfg.get("kafka") or {}).get("brokers", "")).startswith("kafka:"):
            bad.append("relay.yaml: kafka.brokers must be the kafka service")
        if apns.get("endpoint") != "127.0.0.1:2197":
            bad.append("relay.yaml: apns.endpoint must be 127.0.0.1:2197 (the simulator on shared loopback)")
        mounts = {}
        for v in relay.get("volumes") or []:
            src, dst = v.split(":")[:2]
            mounts[dst] = src
        ca = apns.get("ca_file", "")
        if not any(ca.startswith(d + "/") and mounts[d] == "certs" for d in mounts):
            bad.append(f"relay.yaml: apns.ca_file {ca} is not in the simulator's certs volume")
        key = ((apns.get("auth") or {}).get("key_file")) or ""
        if not any(key.startswith(d + "/") and mounts[d] == "keys" for d in mounts):
            bad.append(f"relay.yaml: apns.auth.key_file {key} is not in the keys volume")
        keygen = "\n".join((services.get("keygen") or {}).get("command") or [])
        if key.rsplit("/", 1)[-1] not in keygen:
            bad.append(f"keygen: does not write {key.rsplit('/', 1)[-1]}")
        if "/etc/apns-relay/relay.yaml" not in [d for d in mounts]:
            bad.append("relay: relay.yaml not mounted at /etc/apns-relay/relay.yaml")
    return bad


def text_lines(paths):
    for path in paths:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                yield path, number, line


def check_references(root, *paths):
    """Every document a packaging file points its readers to is a file of the repository, and
    a mention of "the contract" says where it is (the README at the root summarises it)."""
    bad = []
    readme = os.path.realpath(os.path.join(root, "README.md"))
    for path, number, line in text_lines(paths):
        where = f"{os.path.relpath(path, root)}:{number}"
        for ref in re.findall(r"[\w./~-]*[\w-]\.md\b", line):
            if ref.startswith(("/", "~")):
                bad.append(f"{where}: {ref} is outside the repository")
            elif not any(os.path.isfile(os.path.join(base, ref)) for base in (root, os.path.dirname(path))):
                bad.append(f"{where}: {ref} is not a file of the repository")
        if re.search(r"\bcontract\b", line, re.I) and "README.md" not in line and os.path.realpath(path) != readme:
            bad.append(f"{where}: mentions the contract without saying where it is (README.md)")
    return bad


def swift_source(root, relative):
    with open(os.path.join(root, relative)) as f:
        return f.read()


# What /readyz reports missing (Sources/apns-relay/RunCommand.swift) -> the words a description
# of readiness must use; None: not a readiness condition to describe (the relay gave up: /healthz).
READINESS_TERMS = {
    "failed": None,
    "device registrations loading": "device registrations",
    "badge state restoring": "badge state",
    "no APNs connection": "APNs connection",
    "APNs credential refused": "refused",
}
NO_TOPICS = re.compile(r"(does not|doesn't|never|won't|will not) create (the |any )?topics"
                       r"|create them before the relay starts", re.I)


def check_claims(root, values_yaml, *paths):
    """What the packaging says the relay does, against the code that does it: topic creation
    (Relay/Service/TopicSetup.swift) and what /readyz checks (apns-relay/RunCommand.swift)."""
    bad = []
    creates = "creator.create(" in swift_source(root, "Sources/Relay/Service/TopicSetup.swift")
    said_creates = False
    for path, number, line in text_lines(paths):
        where = f"{os.path.relpath(path, root)}:{number}"
        if creates and NO_TOPICS.search(line):
            bad.append(f"{where}: says the relay does not create topics; TopicSetup.ensure creates the missing ones")
        said_creates |= bool(re.search(r"creates the missing ones|creates missing topics", line))
        if re.search(r"kafka[^.;]*\bconnected\b", line, re.I) and re.search(r"readi|readyz", line, re.I):
            bad.append(f"{where}: says readiness means Kafka is connected; /readyz does not check that")
    if creates and not said_creates:
        bad.append("no packaging document says that the relay creates missing topics at start")

    run = swift_source(root, "Sources/apns-relay/RunCommand.swift")
    conditions = [re.sub(r"[:(].*", "", c).strip() for c in re.findall(r'missing\.append\("([^"]+)"\)', run)]
    if not conditions:
        bad.append("RunCommand.swift: no readiness conditions (missing.append(...)) found")
    # The chart documents readiness in the comment above `probes:` in values.yaml.
    with open(values_yaml) as f:
        values = f.read()
    m = re.search(r"((?:^#.*\n)+)probes:", values, re.M)
    described = " ".join((m.group(1) if m else "").replace("#", " ").split())
    for condition in conditions:
        if condition not in READINESS_TERMS:
            bad.append(f"/readyz checks '{condition}', unknown to this check: describe it above probes: "
                       f"in values.yaml and add it to READINESS_TERMS")
    for condition, term in READINESS_TERMS.items():
        if term is None:
            continue
        if condition in conditions and term.lower() not in described.lower():
            bad.append(f"values.yaml: the probes comment does not say that readiness needs the {term}")
        if condition not in conditions and term.lower() in described.lower():
            bad.append(f"values.yaml: the probes comment says readiness needs the {term}; /readyz no longer checks it")
    if re.search(r"\bkafka\b", described, re.I) and not any("kafka" in c.lower() for c in conditions):
        bad.append("values.yaml: the probes comment ties readiness to Kafka; /readyz checks no Kafka connection")
    return bad


def check_image_ref(rendered, chart_dir, built, *docs):
    """The chart's default image is image.repository:appVersion, the reference `make image`
    tags (`built`: scripts/image.sh --name), and the documents build and run that same reference."""
    bad = []
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        values = yaml.safe_load(f)
    with open(os.path.join(chart_dir, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    image = values.get("image") or {}
    expected = f"{image.get('repository')}:{image.get('tag') or chart.get('appVersion')}"
    deployments = [d for d in load_all(rendered) if d.get("kind") == "Deployment"]
    for d in deployments:
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c.get("image") != expected:
                bad.append(f"Deployment {d['metadata']['name']}: image {c.get('image')}, expected {expected}")
    if not deployments:
        bad.append(f"{rendered}: no Deployment rendered")
    if built != "-" and built != expected:
        bad.append(f"make image tags {built}, but the chart's default image is {expected}")
    name = re.escape(str(image.get("repository")))
    for path, number, line in text_lines(docs):
        for ref in re.findall(rf"(?<![\w/.-]){name}:[\w.-]+", line):
            if ref != expected:
                bad.append(f"{os.path.basename(path)}:{number}: image {ref}, but the chart's default is {expected}")
    return bad


def pod_spec(rendered, relay_yaml_out):
    """How the chart runs the relay, for scripts/image-check.sh: writes the ConfigMap's relay.yaml
    to `relay_yaml_out` and prints shell assignments (user, args, mounts, security context)."""
    objs = load_all(rendered)
    (deployment,) = [d for d in objs if d.get("kind") == "Deployment"]
    (configmap,) = [d for d in objs if d.get("kind") == "ConfigMap"]
    with open(relay_yaml_out, "w") as f:
        f.write(configmap["data"]["relay.yaml"])
    pod = deployment["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "relay"]
    sc = c.get("securityContext") or {}
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts") or []}
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    secret = (volumes.get("apns-credentials") or {}).get("secret") or {}
    tmp = volumes.get("tmp") or {}
    facts = {
        "POD_USER": f"{sc.get('runAsUser')}:{sc.get('runAsGroup')}",
        "POD_FS_GROUP": str((pod.get("securityContext") or {}).get("fsGroup", "")),
        "POD_ARGS": " ".join(c.get("args") or []),
        "POD_IMAGE": c.get("image"),
        "POD_PORT": str(c["ports"][0]["containerPort"]),
        "POD_READ_ONLY_ROOT": str(sc.get("readOnlyRootFilesystem")).lower(),
        "POD_CAPS_DROP": ",".join((sc.get("capabilities") or {}).get("drop") or []),
        "POD_NO_PRIVILEGE_ESCALATION": str(sc.get("allowPrivilegeEscalation") is False).lower(),
        "POD_CONFIG_PATH": mounts.get("config", ""),
        "POD_SECRET_DIR": mounts.get("apns-credentials", ""),
        "POD_SECRET_FILES": " ".join(i["path"] for i in secret.get("items") or []),
        "POD_TMP": mounts.get("tmp", "") if "emptyDir" in tmp else "",
        "POD_TMP_SIZE": str((tmp.get("emptyDir") or {}).get("sizeLimit", "")),
        "POD_WRITABLE_MOUNTS": " ".join(m["mountPath"] for m in c.get("volumeMounts") or []
                                        if not m.get("readOnly") and m["name"] != "config"),
    }
    for key, value in facts.items():
        print(f"{key}='{value}'")
    return []


def extract_rules(rendered, rules_out):
    """The rendered PrometheusRule's spec (Prometheus' own rule file format) for promtool."""
    rules = [d for d in load_all(rendered) if d.get("kind") == "PrometheusRule"]
    if len(rules) != 1:
        return [f"{len(rules)} PrometheusRule objects rendered, expected 1"]
    os.makedirs(os.path.dirname(rules_out) or ".", exist_ok=True)
    with open(rules_out, "w") as f:
        yaml.safe_dump({"groups": rules[0]["spec"]["groups"]}, f, sort_keys=False)
    return []


# A metric named in a query: a name followed by its label matchers (every query selects by job).
METRIC = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")


def check_dashboard(rendered):
    """The Grafana dashboard ConfigMap: the sidecar's label, JSON that parses, and every panel a query
    whose every metric selects the dashboard's job, instance and namespace."""
    bad = []
    maps = [d for d in load_all(rendered) if d.get("kind") == "ConfigMap"
            and "grafana_dashboard" in ((d.get("metadata") or {}).get("labels") or {})]
    if len(maps) != 1:
        return [f"{len(maps)} ConfigMaps labelled grafana_dashboard, expected 1"]
    data = maps[0].get("data") or {}
    if list(data) != ["apns-relay.json"]:
        return [f"dashboard ConfigMap keys {list(data)}, expected apns-relay.json"]
    try:
        dashboard = json.loads(data["apns-relay.json"])
    except ValueError as e:
        return [f"dashboard is not JSON: {e}"]
    variables = {v.get("name") for v in (dashboard.get("templating") or {}).get("list") or []}
    for name in ("datasource", "job", "namespace", "instance"):
        if name not in variables:
            bad.append(f"dashboard: no ${name} variable")
    panels = [p for p in dashboard.get("panels") or [] if p.get("type") != "row"]
    if not panels:
        bad.append("dashboard: no panels")
    for panel in panels:
        targets = panel.get("targets") or []
        if not targets:
            bad.append(f"panel {panel.get('title')!r}: no query")
        for target in targets:
            expr = target.get("expr") or ""
            names = METRIC.findall(expr)
            if not names:
                bad.append(f"panel {panel.get('title')!r}: {expr!r} selects no metric")
            for selector in re.findall(r"\{([^}]*)\}", expr):
                if not all(part in selector for part in ('job="$job"', 'namespace=~"$namespace"', 'instance=~"$instance"')):
                    bad.append(f"panel {panel.get('title')!r}: {{{selector}}} does not select the dashboard's job, namespace and instance")
    return bad


def main(argv):
    cmd, args = argv[1], argv[2:]
    bad = {"split-crds": split_crds, "check-crds": check_crds, "check-compose": check_compose,
           "check-references": check_references, "check-claims": check_claims,
           "check-image-ref": check_image_ref, "pod-spec": pod_spec, "extract-rules": extract_rules,
           "check-dashboard": check_dashboard}[cmd](*args)
    for line in bad:
        print(line)
    if not bad and cmd not in ("split-crds", "pod-spec"):
        print("OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
