"""Every committed plot under benchmarks/results was drawn from the
results.json beside it, as it is now, by the renderer as it is now: the
stamp in its PNG text metadata (benchmarks/scaling_tables.py) holds the
sha256 of both. File times mean nothing in a clone; the stamp does."""

import json

from conftest import REPO, committed_results

from benchmarks import scaling_tables

RERENDER = "python -m benchmarks.scaling_tables --rerender-all"


def why_stale(name: str) -> str | None:
    """What changed since the plot was drawn; None where nothing did."""
    png = REPO / name
    stamp = scaling_tables.png_text(png.read_bytes()).get(scaling_tables.STAMP_KEY)
    if stamp is None:
        return "no stamp: drawn before plots were stamped"
    drawn = json.loads(stamp)
    try:
        now = json.loads(scaling_tables.plot_stamp((png.parent / "results.json").read_bytes()))
    except FileNotFoundError:
        return "no results.json beside it"
    changed = [f"{kind}: {file}" for kind in ("inputs", "renderer")
               for file in sorted(set(drawn[kind]) | set(now[kind]))
               if drawn[kind].get(file) != now[kind].get(file)]
    return f"changed since it was drawn: {', '.join(changed)}" if changed else None


def test_every_committed_plot_is_drawn_from_its_results_by_todays_renderer():
    names = committed_results(".png")
    assert names  # the listing worked
    stale = {name: why for name in names if (why := why_stale(name))}
    assert not stale, (f"stale plots (re-draw them: {RERENDER}):\n"
                       + "\n".join(f"  {name}: {why}" for name, why in sorted(stale.items())))


def test_a_drawn_plot_is_stamped_and_drawn_again_the_same(tmp_path):
    results_json = (REPO / "benchmarks/results/gpu-h200-1x1/resnet50-synthetic/results.json")
    (tmp_path / "results.json").write_bytes(results_json.read_bytes())
    scaling_tables.rerender(tmp_path)
    first = (tmp_path / "scaling.png").read_bytes()
    text = scaling_tables.png_text(first)
    assert set(text) == {scaling_tables.STAMP_KEY}  # no matplotlib version, no date
    assert json.loads(text[scaling_tables.STAMP_KEY])["inputs"] == {
        "results.json": scaling_tables.sha256(results_json.read_bytes())}
    scaling_tables.rerender(tmp_path)
    assert (tmp_path / "scaling.png").read_bytes() == first
    assert (tmp_path / "results.json").read_bytes() == results_json.read_bytes()
