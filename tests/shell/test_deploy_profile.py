"""The Kubernetes profile parses with dagster's and dagster-k8s's own config machinery, the
Helm values agree with the instance config, and the code location loads with it."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("dagster_k8s", reason="the k8s extra (dagster-k8s) is not installed")

from dagster._config import process_config, resolve_to_config_type  # noqa: E402
from dagster._core.instance.config import dagster_instance_config  # noqa: E402
from dagster_k8s import K8sRunLauncher  # noqa: E402
from dagster_k8s.job import (  # noqa: E402
    DagsterK8sJobConfig,
    construct_dagster_k8s_job,
    get_user_defined_k8s_config,
)

from foxhunt_pipeline.config import deploy_profile  # noqa: E402

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PG_ENV = {"DAGSTER_PG_USERNAME": "dagster", "DAGSTER_PG_PASSWORD": "pw",
          "DAGSTER_PG_HOST": "pg.example"}

# Field names of the Dagster chart 1.13.27 values schema (helm/dagster/schema/...), for the
# parts these values set; an unknown key would be ignored by the templates, silently.
CHART_TOP_LEVEL = {
    "dagsterWebserver", "dagster-user-deployments", "postgresql",
    "generatePostgresqlPasswordSecret", "generateCeleryConfigSecret", "rabbitmq", "redis",
    "flower", "ingress", "imagePullSecrets", "computeLogManager", "scheduler", "runLauncher",
    "pythonLogs", "dagsterDaemon", "busybox", "migrate", "telemetry", "serviceAccount", "global",
    "retention", "concurrency", "additionalInstanceConfig",
}
CHART_K8S_RUN_LAUNCHER = {
    "image", "imagePullPolicy", "jobNamespace", "loadInclusterConfig", "kubeconfigFile",
    "envConfigMaps", "envSecrets", "envVars", "volumeMounts", "volumes", "labels",
    "failPodOnRunFailure", "resources", "schedulerName", "securityContext", "runK8sConfig",
}
CHART_RUN_K8S_CONFIG = {"containerConfig", "podSpecConfig", "podTemplateSpecMetadata",
                        "jobSpecConfig", "jobMetadata"}
CHART_USER_DEPLOYMENT = {
    "name", "image", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns",
    "port", "env", "envConfigMaps", "envSecrets", "annotations", "nodeSelector", "affinity",
    "tolerations", "podSecurityContext", "securityContext", "resources", "livenessProbe",
    "readinessProbe", "startupProbe", "labels", "volumeMounts", "volumes", "schedulerName",
}
CHART_CONCURRENCY = {"enabled": None, "pools": {"defaultLimit", "granularity",
                                                "opGranularityRunBuffer"},
                     "runs": {"maxConcurrentRuns", "tagConcurrencyLimits"}}


def _instance_yaml() -> dict:
    return yaml.safe_load((DEPLOY / "dagster.yaml").read_text())


def _values() -> dict:
    return yaml.safe_load((DEPLOY / "values.yaml").read_text())


def _validate(klass, config: dict):
    result = process_config(resolve_to_config_type(klass.config_type()), config)
    assert result.success, [e.message for e in result.errors]
    return result.value


def test_instance_config_parses_section_by_section(tmp_path: Path, monkeypatch):
    from dagster._core.run_coordinator import QueuedRunCoordinator
    from dagster_postgres import DagsterPostgresStorage

    (tmp_path / "dagster.yaml").write_text((DEPLOY / "dagster.yaml").read_text())
    config, _ = dagster_instance_config(str(tmp_path))  # the whole-file schema
    launcher = _validate(K8sRunLauncher, config["run_launcher"]["config"])
    assert launcher["load_incluster_config"] is True and launcher["job_namespace"] == "foxhunt"
    assert config["run_launcher"]["module"] == "dagster_k8s"
    assert config["run_coordinator"]["class"] == QueuedRunCoordinator.__name__
    _validate(QueuedRunCoordinator, config["run_coordinator"].get("config") or {})
    assert config["concurrency"]["pools"]["default_limit"] >= 1

    for key, value in PG_ENV.items():
        monkeypatch.setenv(key, value)
    storage = _validate(DagsterPostgresStorage, config["storage"]["postgres"])
    assert storage["postgres_db"]["hostname"] == "pg.example"  # secrets come from the env
    monkeypatch.delenv("DAGSTER_PG_HOST")
    result = process_config(resolve_to_config_type(DagsterPostgresStorage.config_type()),
                            config["storage"]["postgres"])
    assert not result.success and "DAGSTER_PG_HOST" in str(result.errors[0].message)


def test_training_tag_builds_a_gpu_pod_on_a_gpu_node(monkeypatch):
    monkeypatch.setenv(deploy_profile.TRAINING_GPUS_ENV, "2")
    tags = {k: json.dumps(v) for k, v in deploy_profile.training_op_tags().items()}
    user_config = get_user_defined_k8s_config(tags)  # dagster-k8s's own parse of the tag
    job = construct_dagster_k8s_job(
        DagsterK8sJobConfig(job_image="foxhunt:test", dagster_home="/opt/dagster/dagster_home"),
        ["dagster", "api", "execute_step"], "dagster-step-tft-model", user_config)
    pod = job.spec.template.spec
    resources = pod.containers[0].resources
    assert resources.limits[deploy_profile.GPU_RESOURCE] == "2"
    assert resources.requests[deploy_profile.GPU_RESOURCE] == "2"
    assert pod.node_selector == deploy_profile.DEFAULT_GPU_NODE_SELECTOR
    assert any(t.key == deploy_profile.GPU_RESOURCE for t in pod.tolerations)


def test_bad_profile_settings_are_named(monkeypatch):
    monkeypatch.setenv(deploy_profile.GPU_NODE_SELECTOR_ENV, "{pool: gpu")
    with pytest.raises(ValueError, match=deploy_profile.GPU_NODE_SELECTOR_ENV):
        deploy_profile.gpu_step_k8s_config()
    monkeypatch.setenv(deploy_profile.DEPLOY_PROFILE_ENV, "cloud")
    with pytest.raises(ValueError, match="FOXHUNT_DEPLOY_PROFILE='cloud'"):
        deploy_profile.active_deploy_profile()
    with pytest.raises(ValueError, match="at least one GPU"):
        deploy_profile.gpu_step_k8s_config(gpus=0)


def test_executor_per_profile():
    from foxhunt_pipeline import k8s_definitions

    assert k8s_definitions.executor_for_profile("local") is None
    executor = k8s_definitions.executor_for_profile("k8s")
    assert executor.name == "foxhunt_k8s"
    resolved = executor.config_schema.resolve_config({})  # the k8s executor's own schema
    assert resolved.success, resolved.errors
    step = resolved.value["config"]["step_k8s_config"]["container_config"]
    assert step == deploy_profile.STEP_K8S_CONFIG["container_config"]
    assert deploy_profile.GPU_RESOURCE not in step["resources"]["requests"]  # GPUs: training only


def test_helm_values_use_the_chart_keys_and_agree_with_the_instance():
    values = _values()
    assert set(values) <= CHART_TOP_LEVEL, set(values) - CHART_TOP_LEVEL
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    k8s = launcher["config"]["k8sRunLauncher"]
    assert set(k8s) <= CHART_K8S_RUN_LAUNCHER, set(k8s) - CHART_K8S_RUN_LAUNCHER
    assert set(k8s["runK8sConfig"]) <= CHART_RUN_K8S_CONFIG
    for section, allowed in CHART_CONCURRENCY.items():
        if allowed and section in values["concurrency"]:
            assert set(values["concurrency"][section]) <= allowed
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert set(deployment) <= CHART_USER_DEPLOYMENT, set(deployment) - CHART_USER_DEPLOYMENT
    module = deployment["dagsterApiGrpcArgs"][deployment["dagsterApiGrpcArgs"].index("-m") + 1]
    assert importlib.util.find_spec(module) is not None, module
    env = {e["name"]: e["value"] for e in deployment["env"]}
    assert env["FOXHUNT_DEPLOY_PROFILE"] == "k8s"

    # what the chart renders (camelCase -> snake_case) is what deploy/dagster.yaml says
    instance = _instance_yaml()
    rendered = instance["run_launcher"]["config"]
    assert rendered["job_namespace"] == k8s["jobNamespace"]
    assert rendered["image_pull_policy"] == k8s["imagePullPolicy"]
    assert rendered["load_incluster_config"] == k8s["loadInclusterConfig"]
    assert rendered["env_config_maps"] == [c["name"] for c in k8s["envConfigMaps"]]
    assert rendered["env_secrets"] == [s["name"] for s in k8s["envSecrets"]]
    assert rendered["run_k8s_config"] == _snake(k8s["runK8sConfig"])
    assert rendered["service_account_name"] == values["global"]["serviceAccountName"]
    assert rendered["postgres_password_secret"] == values["global"]["postgresqlSecretName"]
    assert instance["concurrency"]["pools"]["default_limit"] == \
        values["concurrency"]["pools"]["defaultLimit"]
    assert instance["concurrency"]["runs"]["max_concurrent_runs"] == \
        values["concurrency"]["runs"]["maxConcurrentRuns"]
    monitoring = values["dagsterDaemon"]["runMonitoring"]
    assert instance["run_monitoring"]["start_timeout_seconds"] == monitoring["startTimeoutSeconds"]


def _snake(value):
    if isinstance(value, dict):
        return {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): _snake(v) for k, v in value.items()}
    return value


def test_the_k8s_code_location_runs_every_job_on_the_k8s_executor():
    from foxhunt_pipeline.k8s_definitions import defs

    names = [job.name for job in defs.get_repository_def().get_all_jobs()]
    assert names
    for name in names:
        assert defs.resolve_job_def(name).executor_def.name == "foxhunt_k8s", name


@pytest.mark.slow
def test_dagster_definitions_validate_with_the_k8s_instance(tmp_path: Path):
    """The CLI loads the instance and the code location. Storage is the one section swapped
    (to SQLite): PostgreSQL needs a live server; everything else is deploy/dagster.yaml."""
    config = _instance_yaml()
    config["storage"] = {"sqlite": {"base_dir": str(tmp_path / "storage")}}
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "DAGSTER_HOME": str(home), "FOXHUNT_HOME": str(tmp_path / "foxhunt"),
           "FOXHUNT_DEPLOY_PROFILE": "k8s"}
    proc = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate",
         "-m", "foxhunt_pipeline.k8s_definitions"],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation successful" in proc.stdout + proc.stderr
