"""`init-env` with a sample's name mistyped names the one meant and lists the samples there
are, as `run` does for an env it cannot find."""

from __future__ import annotations


def test_a_mistyped_sample_is_named_with_the_one_meant(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("init-env", "servce_outage")
    assert code == 2
    assert "no sample env named 'servce_outage'; did you mean service_outage?" in err, err
    assert "order_support" in err, err  # the samples listed
    assert not (tmp_path / "servce_outage").exists()
    code, _, err = cli("init-env", "zzz")
    assert code == 2 and "did you mean" not in err and "service_outage" in err, err
