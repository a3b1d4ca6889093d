"""What the chart must render: security context, probes, grace period, Secret mounts."""

import pytest
import yaml

from conftest import CHART, helm_template, render

ALL_ON = ("-f", str(CHART / "ci" / "all-on-values.yaml"))
APPS = ("-f", str(CHART / "ci" / "apps-values.yaml"))
HPA = ("-f", str(CHART / "ci" / "hpa-values.yaml"))
NAME = "r-apns-relay"


def pod(objs):
    return objs[("Deployment", NAME)]["spec"]["template"]["spec"]


def relay_container(objs):
    (c,) = [c for c in pod(objs)["containers"] if c["name"] == "relay"]
    return c


def relay_config(objs):
    return yaml.safe_load(objs[("ConfigMap", NAME)]["data"]["relay.yaml"])


@pytest.mark.parametrize("values", [(), ALL_ON, HPA], ids=["default", "all-on", "hpa"])
def test_security_context(values):
    objs = render(*values)
    p, c = pod(objs), relay_container(objs)
    assert p["securityContext"]["runAsNonRoot"] is True
    assert p["securityContext"]["runAsUser"] == 10001
    assert p["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # The only writable place: an emptyDir at /tmp.
    tmp = {m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/tmp"}
    assert tmp and all("emptyDir" in v for v in p["volumes"] if v["name"] in tmp)
    assert p["automountServiceAccountToken"] is False


def test_probes_and_command():
    objs = render()
    c = relay_container(objs)
    assert c["args"] == ["run", "--config", "/etc/apns-relay/relay.yaml"]
    assert c["ports"] == [{"name": "http", "containerPort": 9090, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    svc = objs[("Service", NAME)]["spec"]
    assert svc["ports"][0]["port"] == 9090 and svc["ports"][0]["targetPort"] == "http"
    # A config mount that follows relay.http_port.
    moved = render("--set", "config.relay.http_port=9191")
    assert relay_container(moved)["ports"][0]["containerPort"] == 9191


def test_grace_period():
    assert pod(render())["terminationGracePeriodSeconds"] == 40  # 25 + 15
    assert pod(render("--set", "config.relay.shutdown_timeout_s=50"))["terminationGracePeriodSeconds"] == 65
    assert pod(render(*ALL_ON))["terminationGracePeriodSeconds"] == 60
    for grace in (25, 10):
        proc = helm_template("--set", f"terminationGracePeriodSeconds={grace}", check=False)
        assert proc.returncode != 0
        assert "must be greater than config.relay.shutdown_timeout_s (25)" in proc.stderr


def secret_mount(objs, volume="apns-credentials"):
    """(mountPath, secretName, {item paths}) of the APNs credentials (or of the volume named)."""
    p, c = pod(objs), relay_container(objs)
    (vol,) = [v for v in p["volumes"] if v["name"] == volume]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == volume]
    assert mount["readOnly"] is True
    assert vol["secret"]["defaultMode"] == 0o440
    return mount["mountPath"], vol["secret"]["secretName"], {i["path"] for i in vol["secret"]["items"]}


def test_token_key_mounted_and_referenced():
    objs = render("--set", "config.apns.auth.key_id=ABCDE12345", "--set", "config.apns.auth.team_id=TEAM123456")
    path, secret, items = secret_mount(objs)
    assert path == "/etc/apns-relay/secrets/apns" and secret == f"{NAME}-apns" and items == {"AuthKey.p8"}
    auth = relay_config(objs)["apns"]["auth"]
    assert auth == {"key_file": "/etc/apns-relay/secrets/apns/AuthKey.p8",
                    "key_id": "ABCDE12345", "team_id": "TEAM123456"}
    # Not created by default: the operator's Secret (or existingSecret) is used.
    assert ("Secret", f"{NAME}-apns") not in objs
    assert ("Secret", "mine") not in render("--set", "apnsCredentials.existingSecret=mine")
    assert secret_mount(render("--set", "apnsCredentials.existingSecret=mine"))[1] == "mine"


def test_key_id_from_the_secret_for_rotation():
    objs = render("--set", "apnsCredentials.keyIdFromSecret=true", "--set", "config.apns.auth.team_id=TEAM123456")
    path, _, items = secret_mount(objs)
    assert items == {"AuthKey.p8", "key-id"}
    assert relay_config(objs)["apns"]["auth"] == {"key_file": f"{path}/AuthKey.p8", "key_id_file": f"{path}/key-id", "team_id": "TEAM123456"}
    # Mounted without subPath, so the kubelet's update of the Secret reaches the files.
    assert all("subPath" not in m for m in relay_container(objs)["volumeMounts"] if m["name"] == "apns-credentials")
    both = helm_template("--set", "apnsCredentials.keyIdFromSecret=true", "--set", "config.apns.auth.key_id=ABCDE12345", check=False)
    assert both.returncode != 0 and "leave config.apns.auth.key_id unset" in both.stderr


def test_pkcs12_and_sasl_secrets():
    objs = render(*ALL_ON)
    path, secret, items = secret_mount(objs)
    assert secret == f"{NAME}-apns" and items == {"cert.p12"}
    cfg = relay_config(objs)
    assert cfg["apns"]["auth"] == {"p12_file": f"{path}/cert.p12"}
    assert cfg["kafka"]["properties"]["security.protocol"] == "SASL_SSL"
    assert cfg["kafka"]["properties"]["sasl.mechanism"] == "SCRAM-SHA-512"
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in relay_container(objs)["env"]}
    assert env["APNS_RELAY_APNS_AUTH_P12_PASSWORD"] == {"name": f"{NAME}-apns", "key": "p12-password"}
    assert env["APNS_RELAY_KAFKA_PROPERTIES_SASL_PASSWORD"] == {"name": f"{NAME}-kafka", "key": "password"}
    assert env["APNS_RELAY_KAFKA_PROPERTIES_SASL_USERNAME"] == {"name": f"{NAME}-kafka", "key": "username"}
    assert set(objs[("Secret", f"{NAME}-kafka")]["data"]) == {"username", "password"}
    assert set(objs[("Secret", f"{NAME}-apns")]["data"]) == {"cert.p12", "p12-password"}
    # No secret in the ConfigMap.
    assert "not-a-secret" not in objs[("ConfigMap", NAME)]["data"]["relay.yaml"]


def test_certificate_auth_with_existing_sasl_secret():
    objs = render(*HPA)
    path, _, items = secret_mount(objs)
    assert items == {"cert.pem", "key.pem"}
    assert relay_config(objs)["apns"]["auth"] == {"cert_file": f"{path}/cert.pem", "private_key_file": f"{path}/key.pem"}
    env = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in relay_container(objs)["env"]}
    assert env["APNS_RELAY_KAFKA_PROPERTIES_SASL_PASSWORD"] == "kafka-credentials"
    assert ("Secret", "kafka-credentials") not in objs


def test_apps_each_from_its_own_secret():
    objs = render(*APPS)
    apps = relay_config(objs)["apns"]["apps"]
    assert [a["topic"] for a in apps] == ["com.example.app", "com.example.app.widget", "com.other.app", "com.legacy.app",
                                          "com.restricted.app", "com.restricted.app"]
    assert [a.get("key_environment") for a in apps] == [None, None, None, None, "production", "sandbox"]
    # The key id from the Secret, beside the key: a rotation updates both at once.
    assert apps[5] == {"topic": "com.restricted.app", "key_file": "/etc/apns-relay/secrets/apps/5/AuthKey.p8",
                       "key_id_file": "/etc/apns-relay/secrets/apps/5/key-id", "team_id": "TEAMBBBBBB", "key_environment": "sandbox"}
    assert apps[0] == {"topic": "com.example.app", "key_file": "/etc/apns-relay/secrets/apps/0/AuthKey.p8",
                       "key_id": "ABCDE12345", "team_id": "TEAMAAAAAA"}
    assert apps[3] == {"topic": "com.legacy.app", "p12_file": "/etc/apns-relay/secrets/apps/3/cert.p12"}
    assert "auth" not in relay_config(objs)["apns"], "no single-form credential beside the apps"
    for index, (secret, items) in enumerate([("team-a-apns", {"AuthKey.p8"}), ("team-a-apns", {"AuthKey.p8"}),
                                             ("team-b-apns", {"AuthKey.p8"}), ("legacy-apns", {"cert.p12"}),
                                             ("restricted-production-apns", {"AuthKey.p8"}),
                                             ("restricted-sandbox-apns", {"AuthKey.p8", "key-id"})]):
        assert secret_mount(objs, f"apns-app-{index}") == (f"/etc/apns-relay/secrets/apps/{index}", secret, items)
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in relay_container(objs)["env"]}
    assert env["APNS_RELAY_APNS_APPS_3_P12_PASSWORD"] == {"name": "legacy-apns", "key": "p12-password"}
    assert not any(name.startswith("APNS_RELAY_APNS_APPS_0") for name in env)
    # One or the other: apps beside a single credential, or apps written into config, are refused.
    both = helm_template(*APPS, "--set", "apnsCredentials.type=token", check=False)
    assert both.returncode != 0 and "set apnsCredentials.type=none" in both.stderr
    direct = helm_template("--set", "config.apns.apps[0].topic=x", check=False)
    assert direct.returncode != 0


def test_password_in_config_is_refused():
    proc = helm_template("--set", "config.apns.auth.p12_password=x", check=False)
    assert proc.returncode != 0 and "would land in a ConfigMap" in proc.stderr


def test_scaling_objects():
    keda = render(*ALL_ON)
    assert "replicas" not in keda[("Deployment", NAME)]["spec"]
    trigger = keda[("ScaledObject", NAME)]["spec"]["triggers"][0]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"]["consumerGroup"] == "apns-relay"
    assert trigger["metadata"]["topic"] == "push.events"
    assert trigger["metadata"]["allowIdleConsumers"] == "false"
    assert trigger["authenticationRef"]["name"] == f"{NAME}-kafka"
    assert keda[("ServiceMonitor", NAME)]["spec"]["endpoints"][0]["path"] == "/metrics"
    hpa = render(*HPA)
    assert hpa[("HorizontalPodAutoscaler", NAME)]["spec"]["scaleTargetRef"]["name"] == NAME
    assert render()[("Deployment", NAME)]["spec"]["replicas"] == 2
    both = helm_template(*ALL_ON, "--set", "autoscaling.enabled=true", check=False)
    assert both.returncode != 0 and "mutually exclusive" in both.stderr


@pytest.mark.parametrize("bad, message", [
    ("apnsCredentials.type=p8", "apnsCredentials.type must be one of"),
    ("config.relay.shutdwn_timeout_s=30", "Additional property shutdwn_timeout_s is not allowed"),
    ("kafkaSasl.mechanism=SCRAM", "kafkaSasl.mechanism must be one of"),
])
def test_values_schema_rejects_typos(bad, message):
    proc = helm_template("--set", bad, check=False)
    assert proc.returncode != 0 and message in proc.stderr


def test_proxy_credentials_from_an_existing_secret():
    proxy = ("--set", "config.apns.proxy=http://proxy.internal:3128", "--set", "apnsProxyCredentials.existingSecret=apns-proxy")
    objs = render(*proxy)
    assert relay_config(objs)["apns"]["proxy"] == "http://proxy.internal:3128"
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in relay_container(objs)["env"]}
    assert env["APNS_RELAY_APNS_PROXY_CREDENTIALS"] == {"name": "apns-proxy", "key": "credentials"}
    assert "proxy_credentials" not in objs[("ConfigMap", NAME)]["data"]["relay.yaml"]
    # As a file instead: mounted read-only, its path in the config, no env.
    objs = render(*proxy, "--set", "apnsProxyCredentials.mountAs=file")
    assert relay_config(objs)["apns"]["proxy_credentials_file"] == "/etc/apns-relay/secrets/proxy/credentials"
    mounts = {m["name"]: m for m in relay_container(objs)["volumeMounts"]}
    assert mounts["proxy-credentials"]["mountPath"] == "/etc/apns-relay/secrets/proxy" and mounts["proxy-credentials"]["readOnly"]
    (volume,) = [v for v in pod(objs)["volumes"] if v["name"] == "proxy-credentials"]
    assert volume["secret"]["secretName"] == "apns-proxy"
    assert "APNS_RELAY_APNS_PROXY_CREDENTIALS" not in {e["name"] for e in relay_container(objs).get("env", [])}
    # No proxy: nothing of it rendered.
    plain = render()
    assert "proxy" not in relay_config(plain)["apns"]
    assert "proxy-credentials" not in {v["name"] for v in pod(plain)["volumes"]}


@pytest.mark.parametrize("bad, message", [
    (("--set", "config.apns.proxy=http://user:pw@proxy:3128"), "must not hold credentials"),
    (("--set", "config.apns.proxy_credentials=user:pw"), "would land in a ConfigMap"),
    (("--set", "apnsProxyCredentials.existingSecret=apns-proxy"), "config.apns.proxy is empty"),
    (("--set", "config.apns.proxy=proxy:3128"), "config.apns.proxy"),
])
def test_proxy_misconfigurations_are_refused(bad, message):
    proc = helm_template(*bad, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_spans_to_an_otlp_collector():
    assert "tracing" not in relay_config(render())  # empty: pruned, the relay's default (no spans)
    on = render("--set", "config.tracing.otlp_endpoint=http://otel-collector.observability:4318")
    assert relay_config(on)["tracing"] == {"otlp_endpoint": "http://otel-collector.observability:4318"}
    bad = helm_template("--set", "config.tracing.otlp_endpoint=otel-collector:4318", check=False)
    assert bad.returncode != 0 and "otlp_endpoint" in bad.stderr
