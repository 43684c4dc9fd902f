"""The alert rules (docs/observability/alerts.yml) are valid Prometheus rules, fire when they should
(`promtool test rules`: the scheduling-lag and no-scheduler alerts fire once the only scheduler
stops), use only metrics Chime exports, and each has its runbook in docs/operations.md."""

import re
import shutil
import subprocess

import yaml

from tests.support.processes import ROOT

RULES = ROOT / "docs" / "observability" / "alerts.yml"
RULE_TESTS = ROOT / "docs" / "observability" / "alerts_test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: apt-get install prometheus (.ci/run installs it)"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)


def test_promtool_accepts_the_rules():
    answer = promtool("check", "rules", str(RULES))
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert "SUCCESS: 6 rules found" in answer.stdout


def test_the_rule_tests_pass_including_the_scheduler_stopped_case():
    answer = promtool("test", "rules", str(RULE_TESTS))
    assert answer.returncode == 0, answer.stdout + answer.stderr
    scenario = RULE_TESTS.read_text()
    assert "alertname: ChimeSchedulingLag" in scenario and "The only scheduler stops" in scenario


def exported_metric_names() -> set[str]:
    from apps.metrics import collectors, registry

    names = set()
    for metric in (registry.FIRE_LAG, registry.RUNS, registry.DELIVERY_DURATION, registry.MATERIALIZED,
                   registry.PUBLISH_ERRORS):  # fmt: skip
        for family in metric.collect():
            if family.type == "counter":
                names.add(family.name + "_total")
            else:  # histogram
                names.update(family.name + suffix for suffix in ("_bucket", "_count", "_sum"))
    names.update(re.findall(r'GaugeMetricFamily\(\s*"(chime_[a-z_]+)"', (ROOT / collectors.__file__).read_text()))
    return names


def test_rules_use_only_metrics_that_chime_exports_and_each_has_a_runbook():
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    exported = exported_metric_names()
    operations = (ROOT / "docs" / "operations.md").read_text()
    for rule in rules:
        used = set(re.findall(r"\bchime_[a-z_]+", rule["expr"]))
        assert used and used <= exported, f"{rule['alert']} uses {used - exported}, which nothing exports"
        anchor = rule["annotations"]["runbook"].split("#", 1)[1]
        assert f"### Alert: {rule['alert']}" in operations, f"no runbook section for {rule['alert']}"
        assert anchor == f"alert-{rule['alert'].lower()}"


def test_the_grafana_dashboard_queries_only_exported_metrics():
    import json

    dashboard = json.loads((ROOT / "docs" / "observability" / "grafana-dashboard.json").read_text())
    exported = exported_metric_names()
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) >= 10
    for expr in exprs:
        used = set(re.findall(r"\bchime_[a-z_]+", expr))
        assert used and used <= exported, f"{expr!r} uses {used - exported}"
