"""Registries: lazy built-ins, plugins by file, and broken plugins isolated."""

import pytest
from click.testing import CliRunner

from benchmark.cli.main import cli
from benchmark.registry import METHODS, Registry, RegistryError, load_plugin_file

PLUGIN = """
from benchmark.registry import METHODS

@METHODS.register("plugin_test_method")
class PluginMethod:
    name = "plugin_test_method"
"""


def test_lazy_builtin_and_broken_target_only_breaks_its_own_lookup():
    registry = Registry("thing", "fedsynth.none", "benchmark")
    registry.register_lazy("good", "benchmark.spec:RunSpec")
    registry.register_lazy("broken", "benchmark.does_not_exist:Nothing")
    assert registry.names() == ["broken", "good"]
    assert registry.get("good").__name__ == "RunSpec"
    with pytest.raises(RegistryError, match="'broken' failed to load"):
        registry.get("broken")
    with pytest.raises(RegistryError, match="unknown thing 'nope'; available: broken, good"):
        registry.get("nope")


def test_builtins_cannot_be_replaced():
    registry = Registry("thing", "fedsynth.none", "benchmark")
    registry.register_lazy("x", "benchmark.spec:RunSpec")
    with pytest.raises(RegistryError, match="built in"):
        registry.register("x")(object)


def test_plugin_file_registers_method(tmp_path):
    path = tmp_path / "my_plugin.py"
    path.write_text(PLUGIN)
    result = CliRunner().invoke(cli, ["--plugin", str(path), "methods", "list"])
    assert result.exit_code == 0, result.output
    assert "plugin_test_method" in result.output
    assert "popri" in result.output


def test_broken_plugin_file_fails_with_clear_message(tmp_path):
    path = tmp_path / "bad_plugin.py"
    path.write_text("raise ImportError('missing dependency xyz')\n")
    with pytest.raises(RegistryError, match="missing dependency xyz"):
        load_plugin_file(path)


def test_a_plugin_file_reports_what_it_registered_even_when_loaded_twice(tmp_path):
    path = tmp_path / "twice_plugin.py"
    path.write_text(PLUGIN.replace("plugin_test_method", "plugin_twice_method"))
    first = load_plugin_file(path)
    again = load_plugin_file(path)
    assert first == again
    assert METHODS.registered_by(again) == ["plugin_twice_method"]
