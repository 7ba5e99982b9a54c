"""deploy/kubernetes, rendered and judged offline (tests/unit/test_deploy_kubernetes.py).

* :func:`render` -- ``kubectl kustomize`` (the kustomize built into kubectl), the documents it prints.
* :func:`schema_problems` -- built-in kinds against the Kubernetes API schemas
  (``kubernetes-validate``, strict: unknown fields are errors); agent-sandbox's and KEDA's kinds
  against tests/k8s_schemas/ (the fields we use, from their published CRDs); the built-in types
  embedded in those (a PodSpec, NetworkPolicy rules, HPA behavior) through kubernetes-validate
  again. A kind neither knows is a problem, never a pass.
* :func:`security_problems` -- what the deployment promises: restricted pods, sandboxes that
  reach nothing (or, with the egress overlay, the workers' gateway port alone), RBAC limited to sandbox claims, a worker never scaled to zero.

Each check returns a list of problems (empty: fine), so the tests can show it catches the
hostile variants too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent / "k8s_schemas"
#: The oldest Kubernetes the manifests claim (docs/guides/kubernetes.md) and the newest known.
VERSIONS = ("1.30.0", "1.37.0")

APP_NS = "skill-executor"
SANDBOX_NS = "skill-executor-sandboxes"
WORKER_LABELS = {"app.kubernetes.io/name": "skill-executor", "app.kubernetes.io/component": "worker"}
SANDBOX_PORTS = {8080, 9090}
#: (apiGroup, resource) -> the verbs the worker's role may hold; nothing else may be granted.
ALLOWED_VERBS = {
    ("extensions.agents.x-k8s.io", "sandboxclaims"): {"create", "get", "list", "watch", "delete"},
    ("agents.x-k8s.io", "sandboxes"): {"get"},
}
READINESS_PATHS = {"/healthz", "/v1/health"}  # ours; sandboxd's
#: Volume types Pod Security "restricted" admits.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
BUILTIN_GROUPS = {
    "v1",
    "apps/v1",
    "autoscaling/v2",
    "rbac.authorization.k8s.io/v1",
    "networking.k8s.io/v1",
    "policy/v1",
}
CUSTOM = {
    ("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate"): "sandboxtemplate.json",
    ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool"): "sandboxwarmpool.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject.json",
}
Doc = dict[str, Any]


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render(path: Path) -> list[Doc]:
    binary = kubectl()
    assert binary is not None, "kubectl (with its built-in kustomize) is needed"
    done = subprocess.run([binary, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kubectl kustomize {path} failed: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def name_of(doc: Doc) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind')} {meta.get('namespace', '-')}/{meta.get('name')}"


def find(docs: list[Doc], kind: str, name: str | None = None, namespace: str | None = None) -> list[Doc]:
    return [
        d
        for d in docs
        if d.get("kind") == kind
        and (name is None or d["metadata"].get("name") == name)
        and (namespace is None or d["metadata"].get("namespace") == namespace)
    ]


# --- schemas -----------------------------------------------------------------------------


@cache
def _schema(file: str) -> Any:
    return json.loads((SCHEMAS / file).read_text())


def _builtin(doc: Doc, where: str) -> list[str]:
    problems = []
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as exc:
            problems.append(f"{where} (Kubernetes {version}): {getattr(exc, 'message', exc)}")
    return problems


def _embedded(doc: Doc) -> Iterator[tuple[Doc, str]]:
    """The built-in objects inside a custom one, as objects kubernetes-validate knows."""
    spec, where = doc.get("spec") or {}, name_of(doc)
    meta = {"name": doc["metadata"]["name"], "namespace": doc["metadata"].get("namespace", "default")}
    if doc["kind"] == "SandboxTemplate":
        if "podTemplate" in spec:
            yield {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": spec["podTemplate"]}, where
        if "networkPolicy" in spec:
            rules = {k: v for k, v in spec["networkPolicy"].items() if k in ("ingress", "egress")}
            np_spec = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], **rules}
            yield (
                {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": np_spec},
                where,
            )
    if doc["kind"] == "ScaledObject":
        behavior = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior")
        if behavior is not None:
            target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}
            hpa = {"scaleTargetRef": target, "maxReplicas": 1, "behavior": behavior}
            yield (
                {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta, "spec": hpa},
                where,
            )


def schema_problems(docs: list[Doc]) -> list[str]:
    problems: list[str] = []
    for doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key[0] in BUILTIN_GROUPS:
            problems += _builtin(doc, name_of(doc))
        elif key in CUSTOM:
            validator = jsonschema.Draft202012Validator(_schema(CUSTOM[key]))  # type: ignore[index]
            problems += [f"{name_of(doc)}: {e.json_path}: {e.message}" for e in validator.iter_errors(doc)]
            for inner, where in _embedded(doc):
                problems += _builtin(inner, f"{where} (its {inner['kind']})")
        else:
            problems.append(f"{name_of(doc)}: no schema for {key[0]} {key[1]}")
    return problems


# --- security ----------------------------------------------------------------------------


def pods(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    """Every pod spec the manifests make: workloads' templates and sandbox templates'."""
    for doc in docs:
        kind = doc.get("kind")
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"):
            yield name_of(doc), doc["spec"]["template"]["spec"]
        elif kind == "CronJob":
            yield name_of(doc), doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif kind == "Pod":
            yield name_of(doc), doc["spec"]
        elif kind == "SandboxTemplate":
            yield name_of(doc), doc["spec"]["podTemplate"]["spec"]


def _container_problems(where: str, c: Doc, pod_sc: Doc) -> list[str]:
    p, sc = [], c.get("securityContext") or {}
    name = f"{where} container {c.get('name')}"
    if sc.get("allowPrivilegeEscalation") is not False:
        p.append(f"{name}: allowPrivilegeEscalation must be false")
    caps = sc.get("capabilities") or {}
    if caps.get("drop") != ["ALL"] or caps.get("add"):
        p.append(f"{name}: capabilities must drop ALL and add none")
    if sc.get("privileged") or sc.get("readOnlyRootFilesystem") is not True:
        p.append(f"{name}: unprivileged, read-only root file system")
    if (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True) or 0 in (
        sc.get("runAsUser"),
        pod_sc.get("runAsUser"),
        sc.get("runAsGroup"),
        pod_sc.get("runAsGroup"),
    ):
        p.append(f"{name}: must run as non-root")
    if "seccompProfile" in sc and sc["seccompProfile"].get("type") not in ("RuntimeDefault", "Localhost"):
        p.append(f"{name}: seccomp must be RuntimeDefault or Localhost")
    res = c.get("resources") or {}
    for part in ("requests", "limits"):
        if not {"cpu", "memory"} <= set(res.get(part) or {}):
            p.append(f"{name}: resources.{part} must give cpu and memory")
    probe = (c.get("readinessProbe") or {}).get("httpGet") or {}
    if probe.get("path") not in READINESS_PATHS:
        p.append(f"{name}: needs a readiness probe on {sorted(READINESS_PATHS)}")
    if any("hostPort" in port for port in c.get("ports") or []):
        p.append(f"{name}: no host ports")
    return p


def pod_problems(docs: list[Doc]) -> list[str]:
    """Pod Security "restricted" and then some, for every pod; tokens only where a role is bound."""
    token_holders = {
        s["name"]
        for b in find(docs, "RoleBinding")
        for s in b.get("subjects") or []
        if s.get("kind") == "ServiceAccount"
    }
    p: list[str] = []
    for where, spec in pods(docs):
        sc = spec.get("securityContext") or {}
        if sc.get("runAsNonRoot") is not True or (sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            p.append(f"{where}: the pod needs runAsNonRoot and seccompProfile RuntimeDefault")
        if any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC", "hostUsers")):
            p.append(f"{where}: no host namespaces")
        for volume in spec.get("volumes") or []:
            if not set(volume) - {"name"} <= RESTRICTED_VOLUMES:
                p.append(f"{where}: volume {volume.get('name')} is not a type restricted pods may use")
        if (
            spec.get("automountServiceAccountToken") is not False
            and spec.get("serviceAccountName") not in token_holders
        ):
            p.append(f"{where}: a pod without a role must not mount a token (automountServiceAccountToken: false)")
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        if not containers or spec.get("ephemeralContainers"):
            p.append(f"{where}: containers, and no ephemeral ones")
        for container in containers:
            p += _container_problems(where, container, sc)
    for doc in docs:
        if doc.get("kind") == "ServiceAccount" and doc.get("automountServiceAccountToken") is not False:
            p.append(f"{name_of(doc)}: automountServiceAccountToken must be false (pods that need one say so)")
    return p


def namespace_problems(docs: list[Doc]) -> list[str]:
    labels = {d["metadata"]["name"]: d["metadata"].get("labels") or {} for d in find(docs, "Namespace")}
    p = [
        f"namespace {name}: Pod Security must enforce restricted"
        for name, found in labels.items()
        if found.get("pod-security.kubernetes.io/enforce") != "restricted"
    ]
    for doc in docs:
        ns = doc["metadata"].get("namespace")
        if doc["kind"] != "Namespace" and ns not in labels:
            p.append(f"{name_of(doc)}: not in one of the deployment's namespaces")
    return p


def rbac_problems(docs: list[Doc]) -> list[str]:
    p = [f"{name_of(d)}: no cluster-wide RBAC" for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    for role in find(docs, "Role"):
        for rule in role.get("rules") or []:
            fields = [
                rule.get(k) or [] for k in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs")
            ]
            if any("*" in value for field in fields for value in field):
                p.append(f"{name_of(role)}: wildcard in {rule}")
            if rule.get("nonResourceURLs"):
                p.append(f"{name_of(role)}: nonResourceURLs in {rule}")
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    extra = set(rule.get("verbs") or []) - ALLOWED_VERBS.get((group, resource), set())
                    if extra:
                        p.append(f"{name_of(role)}: {sorted(extra)} on {group}/{resource} is beyond the claims' needs")
    for binding in find(docs, "RoleBinding"):
        ref = binding["roleRef"]
        if ref.get("kind") != "Role" or not find(docs, "Role", ref["name"], binding["metadata"]["namespace"]):
            p.append(f"{name_of(binding)}: must bind one of the manifests' Roles")
        for subject in binding.get("subjects") or []:
            account = find(docs, "ServiceAccount", subject.get("name"), subject.get("namespace"))
            if subject.get("kind") != "ServiceAccount" or not account or subject["name"] != "skill-executor-worker":
                p.append(f"{name_of(binding)}: binds {subject}; only the worker's ServiceAccount may hold a role")
    return p


def _peer_is_worker(peer: Doc) -> bool:
    ns = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
    pod = (peer.get("podSelector") or {}).get("matchLabels") or {}
    keys = set(peer) <= {"namespaceSelector", "podSelector"}
    return keys and ns == {"kubernetes.io/metadata.name": APP_NS} and WORKER_LABELS.items() <= pod.items()


def _ingress_problems(where: str, rules: list[Doc]) -> list[str]:
    p = []
    for rule in rules:
        peers, ports = rule.get("from") or [], rule.get("ports") or []
        if not peers or not all(_peer_is_worker(peer) for peer in peers):
            p.append(f"{where}: ingress only from the workers, not {peers or 'anyone'}")
        if not ports or any(x.get("protocol", "TCP") != "TCP" or x.get("port") not in SANDBOX_PORTS for x in ports):
            p.append(f"{where}: ingress only to TCP {sorted(SANDBOX_PORTS)}, not {ports or 'every port'}")
    return p


def gateway_port(docs: list[Doc]) -> int | None:
    """The port the workers' egress gateway listens on (SKILL_EXECUTOR_EGRESS_LISTEN; None: it does not)."""
    workers = find(docs, "Deployment", "skill-executor-worker", APP_NS)
    listen = _env(workers[0], docs).get("SKILL_EXECUTOR_EGRESS_LISTEN") if workers else None
    port = listen.rpartition(":")[2] if listen else ""
    return int(port) if port.isdigit() else None


def _egress_problems(where: str, rules: list[Doc], port: int | None) -> list[str]:
    """Sandboxes may reach the workers' egress gateway port, and nothing else (no DNS, no address)."""
    if port is None:
        return [f"{where}: allows egress from sandboxes, and the workers run no gateway listening for them"]
    p = []
    for rule in rules:
        peers, ports = rule.get("to") or [], rule.get("ports") or []
        if not peers or not all(_peer_is_worker(peer) for peer in peers):
            p.append(f"{where}: egress only to the workers' gateway, not {peers or 'anywhere'}")
        if [(x.get("protocol", "TCP"), x.get("port"), x.get("endPort")) for x in ports] != [("TCP", port, None)]:
            p.append(f"{where}: egress only to TCP {port} (the workers' gateway), not {ports or 'every port'}")
    return p


def sandbox_network_problems(docs: list[Doc]) -> list[str]:
    """Sandboxes reach nothing (agent-sandbox's default egress allows public addresses: ours is
    set, and empty; with the egress overlay, the workers' gateway port alone), only workers reach
    them, and a namespace-wide deny covers every other pod."""
    p: list[str] = []
    for template in find(docs, "SandboxTemplate"):
        where, spec = name_of(template), template["spec"]
        if template["metadata"]["namespace"] != SANDBOX_NS:
            p.append(f"{where}: sandboxes belong in {SANDBOX_NS}")
        if spec.get("networkPolicyManagement", "Managed") != "Managed":
            p.append(f"{where}: the network policy must be Managed (Unmanaged: none is applied)")
        policy = spec.get("networkPolicy")
        if policy is None or not isinstance(policy.get("egress"), list):
            p.append(f"{where}: networkPolicy.egress must be given (omitted: the controller's default, public egress)")
        elif policy["egress"]:  # the egress overlay: to the workers' gateway port only
            p += _egress_problems(where, policy["egress"], gateway_port(docs))
        p += _ingress_problems(where, (policy or {}).get("ingress") or [])
        if spec.get("envVarsInjectionPolicy", "Disallowed") != "Disallowed":
            p.append(f"{where}: claims must not set env (envVarsInjectionPolicy: Disallowed)")
    deny = False
    for policy in find(docs, "NetworkPolicy", namespace=SANDBOX_NS):
        spec, where = policy["spec"], name_of(policy)
        if spec.get("egress"):
            p.append(f"{where}: allows egress from sandboxes")
        p += _ingress_problems(where, spec.get("ingress") or [])
        types = set(spec.get("policyTypes") or [])
        deny |= spec.get("podSelector") == {} and {"Ingress", "Egress"} <= types
    if not deny:
        p.append(f"{SANDBOX_NS}: needs a NetworkPolicy denying all ingress and egress to every pod")
    return p


def _env(deployment: Doc, docs: list[Doc]) -> dict[str, str]:
    """A container's literal env, with what its envFrom ConfigMaps give."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef")
        for cm in find(docs, "ConfigMap", ref["name"] if ref else None, deployment["metadata"]["namespace"]):
            env.update(cm.get("data") or {})
    env.update({e["name"]: e["value"] for e in container.get("env") or [] if "value" in e})
    return env


def wiring_problems(docs: list[Doc]) -> list[str]:
    """The worker's pools exist (with their templates); KEDA scales the worker, from one up."""
    p: list[str] = []
    workers = find(docs, "Deployment", "skill-executor-worker", APP_NS)
    if len(workers) != 1:
        return ["the worker Deployment is missing"]
    env = _env(workers[0], docs)
    namespace = env.get("SKILL_EXECUTOR_AGENT_SANDBOX_NAMESPACE")
    pools = json.loads(env.get("SKILL_EXECUTOR_AGENT_SANDBOX_POOLS", "{}"))
    if not pools:
        p.append("worker: SKILL_EXECUTOR_AGENT_SANDBOX_POOLS names no pool")
    tier = env.get("SKILL_EXECUTOR_AGENT_SANDBOX_TIER", "document")
    if pools and tier not in pools:
        p.append(
            f"worker: SKILL_EXECUTOR_AGENT_SANDBOX_TIER {tier!r} has no pool in SKILL_EXECUTOR_AGENT_SANDBOX_POOLS"
        )
    for tier, pool in pools.items():
        found = find(docs, "SandboxWarmPool", pool, namespace)
        if not found:
            p.append(f"worker: tier {tier}'s pool {namespace}/{pool} does not exist")
        elif not find(docs, "SandboxTemplate", found[0]["spec"]["sandboxTemplateRef"]["name"], namespace):
            p.append(f"pool {pool}: its SandboxTemplate does not exist")
    listed = {(namespace, pool) for pool in pools.values()}
    for pool in find(docs, "SandboxWarmPool"):
        if (pool["metadata"]["namespace"], pool["metadata"]["name"]) not in listed:
            p.append(f"{name_of(pool)}: no tier uses it")
    p += _gateway_wiring_problems(workers[0], env)
    scaled = find(docs, "ScaledObject")
    for so in scaled:
        spec, where = so["spec"], name_of(so)
        target = spec["scaleTargetRef"]["name"]
        if not find(docs, "Deployment", target, so["metadata"]["namespace"]):
            p.append(f"{where}: scales {target}, which does not exist")
        if spec.get("minReplicaCount", 0) < 1:
            p.append(f"{where}: never below one worker (none alive: runs are refused, the queue never grows)")
        queries = [t["metadata"].get("query", "") for t in spec["triggers"] if t["type"] == "prometheus"]
        if not any("skill_executor_queue_depth" in q for q in queries):
            p.append(f"{where}: must scale on skill_executor_queue_depth")
        for hpa in find(docs, "HorizontalPodAutoscaler", namespace=so["metadata"]["namespace"]):
            if hpa["spec"]["scaleTargetRef"]["name"] == target:
                p.append(f"{name_of(hpa)}: {target} is scaled by KEDA already")
    if not any(so["spec"]["scaleTargetRef"]["name"] == "skill-executor-worker" for so in scaled):
        p.append("the worker has no ScaledObject")
    return p


def _gateway_wiring_problems(worker: Doc, env: dict[str, str]) -> list[str]:
    """A worker whose gateway listens for pods tells them where: its pod IP at the same port."""
    listen, advertise = env.get("SKILL_EXECUTOR_EGRESS_LISTEN"), env.get("SKILL_EXECUTOR_EGRESS_ADVERTISE")
    if listen is None and advertise is None:
        return []
    if listen is None or advertise is None:
        return ["worker: SKILL_EXECUTOR_EGRESS_LISTEN and SKILL_EXECUTOR_EGRESS_ADVERTISE go together"]
    port = listen.rpartition(":")[2]
    p = []
    container = worker["spec"]["template"]["spec"]["containers"][0]
    refs = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container.get("env") or []}
    if advertise != f"$(POD_IP):{port}" or refs.get("POD_IP") != "status.podIP":
        p.append(f"worker: SKILL_EXECUTOR_EGRESS_ADVERTISE must be its own pod IP at port {port}, not {advertise}")
    if not any(str(x.get("containerPort")) == port for x in container.get("ports") or []):
        p.append(f"worker: the gateway's port {port} is not a port of its container")
    return p


def reference_problems(docs: list[Doc], secrets: list[Doc]) -> list[str]:
    """Every Secret and ConfigMap a pod reads exists (Secrets: in ``secrets``), with the key."""
    keys = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): set(d.get("data") or {})
        for d in [*docs, *secrets]
        if d["kind"] in ("Secret", "ConfigMap")
    }
    p: list[str] = []
    for doc in docs:
        ns = doc["metadata"].get("namespace")
        for where, spec in pods([doc]):
            for container in spec.get("containers") or []:
                for e in container.get("env") or []:
                    for kind, ref in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                        r = (e.get("valueFrom") or {}).get(ref)
                        if r and r["key"] not in keys.get((kind, ns, r["name"]), set()):
                            p.append(f"{where}: {e['name']} reads {kind} {r['name']} key {r['key']}, not there")
                for source in container.get("envFrom") or []:
                    for kind, ref in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                        if ref in source and (kind, ns, source[ref]["name"]) not in keys:
                            p.append(f"{where}: envFrom {kind} {source[ref]['name']} does not exist")
            for volume in spec.get("volumes") or []:
                if "secret" in volume and ("Secret", ns, volume["secret"]["secretName"]) not in keys:
                    p.append(f"{where}: volume {volume['name']} needs Secret {volume['secret']['secretName']}")
    return p


def security_problems(docs: list[Doc]) -> list[str]:
    return [
        *pod_problems(docs),
        *namespace_problems(docs),
        *rbac_problems(docs),
        *sandbox_network_problems(docs),
        *wiring_problems(docs),
    ]
