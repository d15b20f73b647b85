"""`loopdeck.core`'s public names are read lazily: each one is there, and it is the object its
own module defines."""

import importlib
import subprocess
import sys

import loopdeck.core


def test_every_public_name_of_core_is_the_one_its_module_defines() -> None:
    for name in loopdeck.core.__all__:
        value = getattr(loopdeck.core, name)
        defined_in = importlib.import_module(value.__module__)
        assert getattr(defined_in, name) is value, name


def test_an_unknown_name_of_core_is_an_attribute_error_naming_it() -> None:
    try:
        loopdeck.core.NoSuchThing  # noqa: B018
    except AttributeError as error:
        assert "NoSuchThing" in str(error)
    else:
        raise AssertionError("loopdeck.core.NoSuchThing did not raise")


def test_reading_core_text_does_not_import_the_runtime() -> None:
    code = "import sys, loopdeck.core.text; print('loopdeck.core.runtime' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
