"""The one registry helper (trainer/common/registry.py) every name-picked thing goes through:
targets, job kinds, data formats, experiments, the trainer's commands and their runners."""

from __future__ import annotations

import sys

import pytest

from launch.errors import InputError
from launch.values.jobs import KINDS
from launch.values.target_names import TARGETS
from trainer.args import COMMANDS
from trainer.cli import main as cli
from trainer.common.errors import SettingsError
from trainer.common.registry import Registry
from trainer.data.formats import FORMATS
from trainer.model.experiments import EXPERIMENTS

LAZY = '''
VALUE = object()
'''


def test_the_decorator_returns_what_it_registers_in_the_order_registered():
    targets = Registry("--target")

    @targets.register("local")
    class Local:
        pass

    vertex = targets.register("vertex")(object())
    assert Local.__name__ == "Local" and targets["local"] is Local
    assert targets["vertex"] is vertex
    assert list(targets) == ["local", "vertex"] and len(targets) == 2  # the first: the default


def test_a_name_registered_twice_is_refused_naming_both_places():
    targets = Registry("--target")
    targets.register_lazy("local", "launch.targets.local.executor:Local")
    with pytest.raises(ValueError, match=r"^--target 'local' is registered twice: "
                                         r"launch\.targets\.local\.executor:Local, then "
                                         r"tests\.test_registry:.*\.Twice$"):
        @targets.register("local")
        class Twice:
            pass
    with pytest.raises(ValueError, match="registered twice"):
        targets.register_lazy("local", "elsewhere:Local")
    assert list(targets) == ["local"]


def test_an_unknown_name_is_one_line_with_the_choices_and_close_matches():
    targets = Registry("--target", InputError)
    for name in ("local", "vertex"):
        targets.register(name)(name.title())
    with pytest.raises(InputError, match=r"^--target 'vertx' is not available; use one of "
                                         r"local, vertex \(did you mean vertex\?\)$"):
        targets["vertx"]
    with pytest.raises(InputError, match=r"^--target 'gke' is not available; use one of "
                                         r"local, vertex$"):  # nothing close: no guess
        targets["gke"]
    with pytest.raises(LookupError, match="not available"):  # without an error of its own
        Registry("--format")["yolov8"]
    assert "gke" not in targets and targets.get("gke") is None  # asking is no lookup


@pytest.mark.parametrize("registry,error", [
    (TARGETS, InputError), (KINDS, InputError), (FORMATS, SettingsError),
    (EXPERIMENTS, SettingsError), (COMMANDS, SettingsError), (cli.RUNNERS, SettingsError),
])
def test_each_registry_refuses_with_the_error_its_callers_catch(registry, error):
    with pytest.raises(error, match=f"^{registry.what} 'nothing' is not available; use one "
                                    f"of {', '.join(registry)}$"):
        registry["nothing"]


def test_a_lazy_entry_is_imported_on_its_first_lookup_only(tmp_path, monkeypatch, request):
    (tmp_path / "registry_probe.py").write_text(LAZY)
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(lambda: sys.modules.pop("registry_probe", None))
    probes = Registry("--probe")
    probes.register_lazy("value", "registry_probe:VALUE")
    probes.register_lazy("module", "registry_probe")  # a module is an entry too (formats)
    assert list(probes) == ["value", "module"] and "value" in probes
    assert "registry_probe" not in sys.modules  # listed and asked about, not imported
    value = probes["value"]
    assert value is sys.modules["registry_probe"].VALUE and probes["value"] is value
    assert probes["module"] is sys.modules["registry_probe"]
