"""Host names address nodes in launch files: a cluster file may not give two nodes one name."""
from pathlib import Path

import pytest
import yaml

from planner.inputs.clusters import load_cluster
from planner.errors import SpecError


def _group(name, count, hosts=None):
    g = {"name": name, "count": count, "gpu": "H100", "gpus_per_node": 8, "fabric": "nvswitch",
         "nics": [{"count": 8, "gbps": 400, "transport": "ib"}]}
    if hosts is not None:
        g["hosts"] = hosts
    return g


@pytest.mark.parametrize("groups, needle", [
    ([_group("a", 2, ["x", "x"])], "'x' is listed twice in node group 'a'"),
    # an explicit name equal to another group's default name (<group>-<index>)
    ([_group("a", 2), _group("b", 1, ["a-1"])], "'a-1' names a node of 'a' and one of 'b'"),
])
def test_duplicate_host_names_are_refused_naming_hosts(groups, needle, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "node_groups": groups, "network": {
        "tiers": [{"name": "leaf", "nodes_per_switch": 4}]}}))
    with pytest.raises(SpecError) as err:
        load_cluster(str(path))
    assert "hosts" in str(err.value) and needle in str(err.value)


def test_distinct_host_names_load(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "node_groups": [
        _group("a", 2, ["x", "y"]), _group("b", 2)], "network": {
        "tiers": [{"name": "leaf", "nodes_per_switch": 4}]}}))
    assert load_cluster(str(path)).num_gpus == 32


@pytest.mark.parametrize("field, value, says", [
    ("count", True, "a number, not true"), ("gpus_per_node", "8", "a number, not a string"),
    ("count", "2", "a number, not a string"),
    # YAML's .inf passed gt=0: an infinitely fast link priced every transfer at zero
    ("intra_bw_GBps", float("inf"), "a finite number, not inf"),
    ("price_per_gpu_hour", float("inf"), "a finite number, not inf")])
def test_numbers_are_taken_only_as_written(field, value, says, tmp_path):
    """Pydantic's lax mode read true as 1 node and "8" as 8 GPUs; a typo passed as a setting."""
    group = _group("a", 2) | {field: value}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "node_groups": [group], "network": {
        "tiers": [{"name": "leaf", "nodes_per_switch": 4}]}}))
    with pytest.raises(SpecError) as err:
        load_cluster(str(path))
    assert f"node_groups.0.{field}" in str(err.value) and says in str(err.value)


def test_an_infinite_nic_rate_is_refused_in_a_file_and_by_topo_import(tmp_path):
    group = _group("a", 2)
    group["nics"] = [{"count": 8, "gbps": float("inf"), "transport": "ib"}]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "node_groups": [group], "network": {
        "tiers": [{"name": "leaf", "nodes_per_switch": 4}]}}))
    assert ".inf" in path.read_text()
    with pytest.raises(SpecError) as err:
        load_cluster(str(path))
    assert "node_groups.0.nics.0.gbps" in str(err.value) and "finite" in str(err.value)
    from typer.testing import CliRunner

    from planner.cli.app import app
    fixture = Path(__file__).parent / "fixtures" / "topology" / "nvidia-smi-topo-h100.txt"
    result = CliRunner().invoke(app, ["topo", "import", str(fixture), "--nic-gbps=inf",
                                      "--out", str(tmp_path / "inf.yaml")])
    assert result.exit_code == 2 and "finite" in result.output
    assert not (tmp_path / "inf.yaml").exists()
