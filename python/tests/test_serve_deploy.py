"""The Kubernetes manifests of deploy/k8s/ agree with the server they deploy (docs/serving.md
"Scale-out"): the container's `tessera serve` arguments start a server (on the tiny checkpoint, the
model path and port swapped for the test's), the probes' path answers 200 on the probe's port without
a key, the scraped path answers Prometheus text with the key and 401 without, the Service, Ingress and
ServiceMonitor point at the container's named port, and the engine's threads match the CPUs given."""
from __future__ import annotations

import os

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of transformers and ray)")

from helpers.models import REPO
from helpers.serve_client import metrics, raw, requires_serve
from tessera.serve_process import ServeProcess
from helpers.serve_models import text_checkpoint

K8S = os.path.join(REPO, "deploy", "k8s")


def docs():
    out = {}
    for name in sorted(os.listdir(K8S)):
        with open(os.path.join(K8S, name), encoding="utf-8") as f:
            for d in yaml.safe_load_all(f):
                out[d["kind"]] = d
    return out


def container(d):
    spec = d["Deployment"]["spec"]["template"]["spec"]
    assert len(spec["containers"]) == 1
    return spec["containers"][0]


def flag(args, name):
    return args[args.index(name) + 1]


def test_selectors_ports_and_resources_agree():
    d = docs()
    labels = d["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert d["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for kind in ("Service", "PodDisruptionBudget"):
        sel = d[kind]["spec"]["selector"]
        assert (sel.get("matchLabels") or sel).items() <= labels.items(), kind
    c = container(d)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == int(flag(c["args"], "--port"))
    assert [p["targetPort"] for p in d["Service"]["spec"]["ports"]] == ["http"]
    assert d["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == d["Service"]["spec"]["ports"][0]["name"]
    backend = d["Ingress"]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": d["Service"]["metadata"]["name"], "port": {"name": "http"}}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    annotations = d["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == ports["http"]
    res = c["resources"]
    assert res["requests"] == res["limits"]  # Guaranteed QoS
    assert int(flag(c["args"], "--threads")) == int(res["requests"]["cpu"])
    assert flag(c["args"], "--host") == "0.0.0.0"  # reachable by the probes and the Service
    assert c["command"] == ["tessera", "serve"]


@requires_serve
def test_the_container_arguments_start_a_server_the_probes_and_scraper_can_read(tmp_path):
    d = docs()
    c = container(d)
    args = list(c["args"])
    key = "k8s-test-key"
    assert "$(TESSERA_API_KEY)" in args and any(e["name"] == "TESSERA_API_KEY" for e in c["env"])
    args[args.index("$(TESSERA_API_KEY)")] = key
    # The test's model, host and port (ServeProcess gives those); every other argument as deployed.
    rest = []
    i = 0
    while i < len(args):
        if args[i] in ("--model", "--host", "--port"):
            i += 2
            continue
        rest.append(args[i])
        i += 1
    ckpt = text_checkpoint(tmp_path / "model")
    with ServeProcess(ckpt, *rest) as server:
        probe = c["readinessProbe"]["httpGet"]["path"]
        status, _, _ = raw(server.url + probe, timeout=c["readinessProbe"]["timeoutSeconds"])
        assert status == 200
        scrape = d["ServiceMonitor"]["spec"]["endpoints"][0]["path"]
        assert raw(server.url + scrape)[0] == 401
        values = metrics(server, {"Authorization": f"Bearer {key}"})
        assert values[("tessera_slots_total", frozenset())] == int(flag(args, "--slots"))
