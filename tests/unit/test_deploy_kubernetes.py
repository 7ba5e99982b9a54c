"""deploy/kubernetes: both overlays render with kustomize, validate against the API schemas
(built-in kinds) and the published CRDs' fields (agent-sandbox, KEDA), and keep their security
promises; each check is also shown to catch the hostile variant it exists for."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import in_ci
from tests.kube_manifests import (
    ROOT,
    SANDBOX_NS,
    Doc,
    find,
    kubectl,
    reference_problems,
    render,
    schema_problems,
    security_problems,
)

OVERLAYS = ("gvisor", "runc", "egress")


@pytest.fixture(autouse=True)
def _needs_kubectl() -> None:
    if kubectl() is None:
        if in_ci():
            pytest.fail("CI renders the Kubernetes manifests: kubectl (its built-in kustomize) is missing")
        pytest.skip("kubectl (its built-in kustomize) is not installed")


@cache
def _rendered(overlay: str) -> tuple[Doc, ...]:
    return tuple(render(ROOT / "overlays" / overlay))


def rendered(overlay: str) -> list[Doc]:
    return copy.deepcopy(list(_rendered(overlay)))


@cache
def _secrets(tmp: str) -> tuple[Doc, ...]:
    """deploy/kubernetes/secrets rendered from its *.example files (copied, as an operator would)."""
    folder = Path(tmp) / "secrets"
    shutil.copytree(ROOT / "secrets", folder)
    for example in folder.glob("*.example"):
        example.rename(example.with_suffix(""))
    return tuple(render(folder))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_its_schema(overlay: str) -> None:
    docs = rendered(overlay)
    kinds = {d["kind"] for d in docs}
    assert {"SandboxTemplate", "SandboxWarmPool", "ScaledObject", "Deployment", "Role", "NetworkPolicy"} <= kinds
    assert schema_problems(docs) == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_security_promises_hold(overlay: str) -> None:
    assert security_problems(rendered(overlay)) == []


def test_sandboxes_run_on_gvisor_unless_the_runc_overlay_is_chosen() -> None:
    for overlay, expected in (("gvisor", {"gvisor"}), ("runc", {None}), ("egress", {"gvisor"})):
        templates = find(rendered(overlay), "SandboxTemplate")
        assert {t["metadata"]["name"] for t in templates} == {
            "skill-executor-base",
            "skill-executor-document",
            "skill-executor-python313",
        }
        assert {t["spec"]["podTemplate"]["spec"].get("runtimeClassName") for t in templates} == expected
    # the overlays differ in that alone
    strip = [
        [
            {**d, "spec": {**d["spec"], "podTemplate": None}} if d["kind"] == "SandboxTemplate" else d
            for d in rendered(o)
        ]
        for o in OVERLAYS
    ]
    assert strip[0] == strip[1]


def test_api_replicas_hold_no_token_and_no_role() -> None:
    docs = rendered("gvisor")
    (api,) = find(docs, "Deployment", "skill-executor-api")
    assert api["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    subjects = [s["name"] for b in find(docs, "RoleBinding") for s in b["subjects"]]
    assert subjects == ["skill-executor-worker"]
    (role,) = find(docs, "Role")
    assert role["metadata"]["namespace"] == SANDBOX_NS


def test_the_secrets_render_and_every_reference_resolves(tmp_path: Path) -> None:
    secrets = list(_secrets(str(tmp_path)))
    assert {s["metadata"]["name"] for s in secrets} == {
        "skill-executor-database", "skill-executor-store", "skill-executor-api-keys",
    }  # fmt: skip
    assert schema_problems(secrets) == []
    for overlay in OVERLAYS:
        assert reference_problems(rendered(overlay), secrets) == []
    assert reference_problems(rendered("gvisor"), [s for s in secrets if "store" not in s["metadata"]["name"]])
    ignored = (ROOT / "secrets" / ".gitignore").read_text().split()
    assert {"database.env", "store.env", "keys"} <= set(ignored)


# --- the checks catch what they exist for --------------------------------------------------


def _one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    return find(docs, kind, name)[0]


def _template(docs: list[Doc]) -> Doc:
    return _one(docs, "SandboxTemplate", "skill-executor-base")


def _sandbox_pod(docs: list[Doc]) -> Doc:
    return _template(docs)["spec"]["podTemplate"]["spec"]  # type: ignore[no-any-return]


def _worker(docs: list[Doc]) -> Doc:
    return _one(docs, "Deployment", "skill-executor-worker")["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _api(docs: list[Doc]) -> Doc:
    return _one(docs, "Deployment", "skill-executor-api")["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _pools(docs: list[Doc], value: dict[str, str]) -> None:
    _one(docs, "ConfigMap", "skill-executor-worker")["data"]["SKILL_EXECUTOR_AGENT_SANDBOX_POOLS"] = json.dumps(value)


ANYWHERE = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]
ALLOW_EGRESS = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "allow-dns", "namespace": SANDBOX_NS},
    "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]},
}
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "x"},
    "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
}

#: name -> (the hostile change, a word of the problem it must raise)
SECURITY_ATTACKS: dict[str, tuple[Callable[[list[Doc]], object], str]] = {
    "sandbox egress to anywhere": (lambda d: _template(d)["spec"]["networkPolicy"].update(egress=ANYWHERE), "egress"),
    "sandbox policy left to the controller's default (public egress)": (
        lambda d: _template(d)["spec"].pop("networkPolicy"),
        "egress",
    ),
    "sandbox policy Unmanaged": (lambda d: _template(d)["spec"].update(networkPolicyManagement="Unmanaged"), "Managed"),
    "another policy opens egress": (lambda d: d.append(copy.deepcopy(ALLOW_EGRESS)), "allows egress"),
    "namespace-wide deny removed": (lambda d: d.remove(_one(d, "NetworkPolicy", "deny-all")), "denying all"),
    "sandbox ingress from any pod": (
        lambda d: _template(d)["spec"]["networkPolicy"]["ingress"][0].update({"from": [{"podSelector": {}}]}),
        "ingress only from the workers",
    ),
    "sandbox ingress on every port": (
        lambda d: _template(d)["spec"]["networkPolicy"]["ingress"][0].pop("ports"),
        "ingress only to TCP",
    ),
    "claims may set env": (lambda d: _template(d)["spec"].update(envVarsInjectionPolicy="Allowed"), "env"),
    "role patches claims": (lambda d: _one(d, "Role")["rules"][0]["verbs"].append("patch"), "beyond"),
    "role wildcard verb": (lambda d: _one(d, "Role")["rules"][1].update(verbs=["*"]), "wildcard"),
    "role reads secrets": (
        lambda d: _one(d, "Role")["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
        "beyond",
    ),
    "role reads pods": (
        lambda d: _one(d, "Role")["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
        "beyond",
    ),
    "a cluster role": (lambda d: d.append(copy.deepcopy(CLUSTER_ROLE)), "cluster-wide"),
    "the API's account bound to the role": (
        lambda d: _one(d, "RoleBinding")["subjects"].append(
            {"kind": "ServiceAccount", "name": "skill-executor-api", "namespace": "skill-executor"}
        ),
        "only the worker",
    ),
    "API pod mounts a token": (lambda d: _api(d).update(automountServiceAccountToken=True), "token"),
    "sandbox pod mounts a token": (lambda d: _sandbox_pod(d).pop("automountServiceAccountToken"), "token"),
    "writable root": (lambda d: _worker(d)["containers"][0]["securityContext"].pop("readOnlyRootFilesystem"), "root"),
    "privilege escalation": (
        lambda d: _sandbox_pod(d)["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        "allowPrivilegeEscalation",
    ),
    "a capability added": (
        lambda d: _sandbox_pod(d)["containers"][0]["securityContext"]["capabilities"].update(add=["NET_RAW"]),
        "capabilities",
    ),
    "privileged": (lambda d: _api(d)["containers"][0]["securityContext"].update(privileged=True), "unprivileged"),
    "root user": (lambda d: _sandbox_pod(d)["securityContext"].update(runAsUser=0), "non-root"),
    "no seccomp": (lambda d: _worker(d)["securityContext"].pop("seccompProfile"), "seccomp"),
    "host network": (lambda d: _sandbox_pod(d).update(hostNetwork=True), "host namespaces"),
    "hostPath volume": (
        lambda d: _worker(d)["volumes"].append({"name": "sock", "hostPath": {"path": "/var/run"}}),
        "not a type",
    ),
    "no limits": (lambda d: _sandbox_pod(d)["containers"][0]["resources"].pop("limits"), "limits"),
    "no readiness probe": (lambda d: _api(d)["containers"][0].pop("readinessProbe"), "readiness"),
    "namespace without Pod Security": (
        lambda d: _one(d, "Namespace", SANDBOX_NS)["metadata"]["labels"].pop("pod-security.kubernetes.io/enforce"),
        "restricted",
    ),
    "workers scaled to zero": (lambda d: _one(d, "ScaledObject")["spec"].update(minReplicaCount=0), "one worker"),
    "an HPA on the worker too": (
        lambda d: _one(d, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"].update(name="skill-executor-worker"),
        "KEDA",
    ),
    "a tier's pool missing": (lambda d: _pools(d, {"base": "skill-executor-base", "gpu": "nope"}), "does not exist"),
    "a pool no tier uses": (lambda d: _pools(d, {"base": "skill-executor-base"}), "no tier"),
    "the runs' tier without a pool": (
        lambda d: _one(d, "ConfigMap", "skill-executor-worker")["data"].update(SKILL_EXECUTOR_AGENT_SANDBOX_TIER="gpu"),
        "has no pool",
    ),
}


@pytest.mark.parametrize("attack", sorted(SECURITY_ATTACKS))
def test_security_checks_catch(attack: str) -> None:
    docs = rendered("gvisor")
    change, word = SECURITY_ATTACKS[attack]
    change(docs)
    problems = security_problems(docs)
    assert problems and any(word in p for p in problems), problems


SCHEMA_ATTACKS: dict[str, tuple[Callable[[list[Doc]], object], str]] = {
    "typo in a SandboxTemplate field": (
        lambda d: _template(d)["spec"].update(netwrokPolicy={"egress": []}),
        "netwrokPolicy",
    ),
    "a warm pool of -1": (lambda d: _one(d, "SandboxWarmPool")["spec"].update(replicas=-1), "replicas"),
    "a warm pool without its template": (
        lambda d: _one(d, "SandboxWarmPool")["spec"].pop("sandboxTemplateRef"),
        "sandboxTemplateRef",
    ),
    "a PodSpec field that does not exist": (lambda d: _sandbox_pod(d).update(runtimeClass="gvisor"), "runtimeClass"),
    "an egress rule of the wrong shape": (
        lambda d: _template(d)["spec"]["networkPolicy"].update(egress=[{"to": "anywhere"}]),
        "NetworkPolicy",
    ),
    "a prometheus trigger without its query": (
        lambda d: _one(d, "ScaledObject")["spec"]["triggers"][0]["metadata"].pop("query"),
        "query",
    ),
    "a prometheus trigger with an unknown key": (
        lambda d: _one(d, "ScaledObject")["spec"]["triggers"][0]["metadata"].update(serverAdress="x"),
        "serverAdress",
    ),
    "an HPA behavior of the wrong shape": (
        lambda d: _one(d, "ScaledObject")["spec"]["advanced"]["horizontalPodAutoscalerConfig"].update(
            behavior={"scaleDown": {"stabilizationWindowSeconds": "300"}}
        ),
        "HorizontalPodAutoscaler",
    ),
    "an unknown container field in a Deployment": (
        lambda d: _api(d)["containers"][0].update(commands=["x"]),
        "commands",
    ),
    "a kind nobody knows": (
        lambda d: d.append({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}),
        "no schema",
    ),
}


@pytest.mark.parametrize("attack", sorted(SCHEMA_ATTACKS))
def test_schema_checks_catch(attack: str) -> None:
    docs = rendered("gvisor")
    change, word = SCHEMA_ATTACKS[attack]
    change(docs)
    problems = schema_problems(docs)
    assert problems and any(word in p for p in problems), problems


# --- the egress overlay: sandboxes reach the workers' gateway port, and nothing else ----------------


def test_the_egress_overlay_opens_the_workers_gateway_port_to_sandboxes_and_nothing_else() -> None:
    docs = rendered("egress")
    worker = _one(docs, "Deployment", "skill-executor-worker")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in worker["env"]}
    assert env["SKILL_EXECUTOR_EGRESS_LISTEN"] == "0.0.0.0:3128"
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["SKILL_EXECUTOR_EGRESS_ADVERTISE"] == "$(POD_IP):3128"  # after POD_IP: Kubernetes expands it
    names = [e["name"] for e in worker["env"]]
    assert names.index("POD_IP") < names.index("SKILL_EXECUTOR_EGRESS_ADVERTISE")
    for template in find(docs, "SandboxTemplate"):
        (rule,) = template["spec"]["networkPolicy"]["egress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": 3128}]
        assert rule["to"] == [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "skill-executor"}},
                "podSelector": {
                    "matchLabels": {"app.kubernetes.io/name": "skill-executor", "app.kubernetes.io/component": "worker"}
                },
            }
        ]
    # everything but the worker's egress settings and the templates' egress is the default overlay's
    base = rendered("gvisor")
    for doc in (*find(docs, "SandboxTemplate"), *find(base, "SandboxTemplate")):
        doc["spec"]["networkPolicy"]["egress"] = []
    for found in (docs, base):
        container = _worker(found)["containers"][0]
        container["env"] = [e for e in container["env"] if "EGRESS" not in e["name"] and e["name"] != "POD_IP"]
        container["ports"] = [x for x in container["ports"] if x["name"] != "egress"]
    assert docs == base


def _egress_rule(docs: list[Doc]) -> Doc:
    return _template(docs)["spec"]["networkPolicy"]["egress"][0]  # type: ignore[no-any-return]


def _worker_env(docs: list[Doc], name: str, value: str | None) -> None:
    env = _worker(docs)["containers"][0]["env"]
    env[:] = [e for e in env if e["name"] != name] + ([{"name": name, "value": value}] if value is not None else [])


EGRESS_ATTACKS: dict[str, tuple[Callable[[list[Doc]], object], str]] = {
    "egress to the workers and anywhere": (
        lambda d: _egress_rule(d)["to"].append({"ipBlock": {"cidr": "0.0.0.0/0"}}),
        "only to the workers",
    ),
    "egress to any pod": (lambda d: _egress_rule(d).update({"to": [{"podSelector": {}}]}), "only to the workers"),
    "egress to every port of the workers": (lambda d: _egress_rule(d).pop("ports"), "only to TCP 3128"),
    "DNS besides": (
        lambda d: _egress_rule(d)["ports"].append({"protocol": "UDP", "port": 53}),
        "only to TCP 3128",
    ),
    "a port range": (lambda d: _egress_rule(d)["ports"][0].update(endPort=3200), "only to TCP 3128"),
    "egress while the workers' gateway does not listen": (
        lambda d: _worker_env(d, "SKILL_EXECUTOR_EGRESS_LISTEN", None),
        "run no gateway",
    ),
    "the advertised address is not the pod's": (
        lambda d: _worker_env(d, "SKILL_EXECUTOR_EGRESS_ADVERTISE", "skill-executor-worker:3128"),
        "own pod IP",
    ),
    "the gateway's port not declared": (
        lambda d: _worker(d)["containers"][0].update(
            ports=[x for x in _worker(d)["containers"][0]["ports"] if x["name"] != "egress"]
        ),
        "not a port of its container",
    ),
}


@pytest.mark.parametrize("attack", sorted(EGRESS_ATTACKS))
def test_egress_checks_catch(attack: str) -> None:
    docs = rendered("egress")
    change, word = EGRESS_ATTACKS[attack]
    change(docs)
    problems = security_problems(docs)
    assert problems and any(word in p for p in problems), problems
