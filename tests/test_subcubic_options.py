"""The subcubic strategy's options: typed, enumerable, round-trip to names."""

from __future__ import annotations

import pytest

from generator.certify.strategies import listing, resolve, subcubic
from generator.cli import main as gen_cert


def test_every_option_round_trips():
    grid = subcubic.grid()
    assert len(grid) == len(set(grid)) >= 10
    for options in grid:
        assert subcubic.Options.parse(options.name()) == options
        module, kwargs = resolve(options.name())
        assert module is subcubic and kwargs == {"options": options}
    assert listing("subcubic") == [o.name() for o in grid]


def test_default_and_partial_names():
    assert subcubic.Options.parse("subcubic") == subcubic.Options()
    assert subcubic.Options.parse("subcubic:near=0") == subcubic.Options(near=0)


@pytest.mark.parametrize("name", ["subcubic:direct=svd", "subcubic:near=-1", "subcubic:near=x",
                                  "subcubic:bogus=1", "subcubic:near=1,near=2", "cubic:near=1",
                                  "nonsense"])
def test_bad_names_are_refused(name, capsys):
    with pytest.raises(ValueError):
        resolve(name)
    assert gen_cert(["--strategy", name, "--list"]) == 2
    assert "gen-cert:" in capsys.readouterr().err


def test_list_prints_the_grid(capsys):
    assert gen_cert(["--strategy", "subcubic", "--list"]) == 0
    assert capsys.readouterr().out.split() == [o.name() for o in subcubic.grid()]
