"""The gradcode command: `gradcode simulate` on a spec with several seeds.
"""

from __future__ import annotations


def test_simulate_refuses_to_drop_the_seeds_of_a_spec(tmp_path):
    """`gradcode simulate` on a spec with [run] seeds asks for --seed rather than run seed 0 in silence."""
    path = tmp_path / "seeds.toml"
    text = '[cluster]\nworkers = 4\n[delay]\nname = "pareto"\n[[schemes]]\nname = "sync"\n[run]\niterations = 3\n'
    path.write_text(text + "seeds = [3, 4]\n")
    (tmp_path / "one.toml").write_text(text + "seed = 4\n")
    from gradcode.cli import main

    assert main(["simulate", str(path), "--out", str(tmp_path / "a")]) == 2
    assert not (tmp_path / "a").exists()
    assert main(["simulate", str(path), "--out", str(tmp_path / "b"), "--seed", "4"]) == 0
    assert main(["simulate", str(tmp_path / "one.toml"), "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "b" / "records.jsonl").read_text() == (tmp_path / "c" / "records.jsonl").read_text()
