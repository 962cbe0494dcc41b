"""plugins/plugin_utils/role_data.py: the one reader of another role's defaults and argument
specs, and its one rule on templated defaults (unknown to the reader: role_default refuses
one, literal_defaults leaves it out). The filters role_default, port_plan and
engine_replicas all read through it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]

from ansible_collections.vllm_fleet.serving.plugins.filter import (  # noqa: E402
    kv_plan as kv_plan_filters,
)
from ansible_collections.vllm_fleet.serving.plugins.filter import (  # noqa: E402
    port_plan as port_plan_filters,
)
from ansible_collections.vllm_fleet.serving.plugins.filter import (  # noqa: E402
    role_vars as role_vars_filters,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils import (  # noqa: E402
    port_plan as port_plan_utils,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils import (  # noqa: E402
    role_data,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (  # noqa: E402
    ROLES_DIR,
    RoleDefaultError,
    argument_specs,
    entry_point_options,
    is_templated,
    known_role_vars,
    literal_defaults,
    role_default,
    role_defaults_file,
)


@pytest.fixture()
def roles(tmp_path: Path) -> Path:
    """Two made-up roles: demo (literal, templated and nested-templated defaults, specs)
    and demo_extra (a longer name under the same prefix)."""
    (tmp_path / "demo" / "defaults").mkdir(parents=True)
    (tmp_path / "demo" / "meta").mkdir()
    (tmp_path / "demo" / "defaults" / "main.yml").write_text(yaml.safe_dump({
        "demo_port": 9000, "demo_address": "{{ ansible_host }}",
        "demo_nested": {"source": "{% if x %}a{% endif %}", "n": 1},
        "demo_list": [1, "{{ y }}"], "demo_plain": {"a": [1, 2]}}))
    (tmp_path / "demo" / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({
        "argument_specs": {"main": {"options": {"demo_port": {"type": "int"}}},
                           "extra": {"options": {"demo_plain": {"type": "dict"}}}}}))
    (tmp_path / "demo_extra" / "defaults").mkdir(parents=True)
    (tmp_path / "demo_extra" / "defaults" / "main.yml").write_text("demo_extra_x: 1\n")
    return tmp_path


def test_the_templated_rule() -> None:
    assert is_templated("{{ x }}") and is_templated("a {% if b %}c{% endif %}")
    assert is_templated({"k": ["ok", {"deep": "{{ y }}"}]}) and is_templated(["{{ z }}"])
    assert not is_templated("plain") and not is_templated(8000)
    assert not is_templated({"a": [1, "b"]}) and not is_templated(None)


def test_role_default_refuses_a_templated_default_at_any_depth(roles: Path) -> None:
    assert role_default("demo_port", roles) == 9000
    assert role_default("demo_plain", roles) == {"a": [1, 2]}
    assert role_default("demo_extra_x", roles) == 1  # the longest role name owns it
    for name in ("demo_address", "demo_nested", "demo_list"):
        with pytest.raises(RoleDefaultError, match=(
                f"{name}: the default of role demo is a template .*; default to the "
                "variable it names instead")):
            role_default(name, roles)
    with pytest.raises(RoleDefaultError, match="demo_none: not a default of role demo"):
        role_default("demo_none", roles)
    with pytest.raises(RoleDefaultError, match="nobody_x: no role under .* owns"):
        role_default("nobody_x", roles)


def test_literal_defaults_leave_a_templated_default_out(roles: Path) -> None:
    assert literal_defaults(roles, ["demo", "demo_extra", "missing"]) == {
        "demo_port": 9000, "demo_plain": {"a": [1, 2]}, "demo_extra_x": 1}
    # As written, templates and all, for a reader that wants them.
    assert role_defaults_file(roles / "demo")["demo_address"] == "{{ ansible_host }}"
    assert role_defaults_file(roles / "missing") == {}


def test_values_are_copies(roles: Path) -> None:
    role_default("demo_plain", roles)["a"].append(3)
    literal_defaults(roles, ["demo"])["demo_plain"]["a"].append(4)
    role_defaults_file(roles / "demo")["demo_plain"]["a"].append(5)
    assert role_default("demo_plain", roles) == {"a": [1, 2]}


def test_a_changed_file_is_read_again(roles: Path) -> None:
    assert role_default("demo_extra_x", roles) == 1
    path = roles / "demo_extra" / "defaults" / "main.yml"
    path.write_text("demo_extra_x: 2\n")
    stat = path.stat()
    import os
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert role_default("demo_extra_x", roles) == 2


def test_argument_specs(roles: Path) -> None:
    assert set(argument_specs(roles / "demo")) == {"main", "extra"}
    assert entry_point_options(roles / "demo") == {"demo_port": {"type": "int"}}
    assert known_role_vars(roles / "demo") == {"demo_port", "demo_plain"}
    (roles / "demo_extra" / "meta").mkdir()
    (roles / "demo_extra" / "meta" / "argument_specs.yml").write_text("other: 1\n")
    assert argument_specs(roles / "demo_extra") == {} and known_role_vars(
        roles / "demo_extra") == set()
    with pytest.raises(KeyError):
        entry_point_options(roles / "demo_extra")
    with pytest.raises(OSError):
        argument_specs(roles / "missing")


def test_the_collections_roles_and_the_filters_share_the_reader() -> None:
    assert ROLES_DIR == ROOT / "roles" or ROLES_DIR.resolve() == (ROOT / "roles").resolve()
    # One reader: the filters' names are the shared functions, not copies.
    assert role_vars_filters.role_default is role_data.role_default
    assert role_vars_filters.RoleDefaultError is role_data.RoleDefaultError
    assert role_vars_filters.known_role_vars is role_data.known_role_vars
    assert port_plan_utils.literal_defaults is role_data.literal_defaults
    assert kv_plan_filters.role_default is role_data.role_default


def test_the_port_plan_counts_a_templated_address_as_every_interface() -> None:
    # gpu_metrics_listen_address defaults to "{{ ansible_host | default(inventory_hostname) }}".
    with pytest.raises(RoleDefaultError, match="gpu_metrics_listen_address: .* is a template"):
        role_default("gpu_metrics_listen_address")
    listeners = port_plan_filters.port_plan([], {}, ROLES_DIR)
    exporter = next(x for x in listeners if x["variable"] == "gpu_metrics_node_exporter_port")
    assert exporter["address"] == "" and exporter["port"] == 9100
