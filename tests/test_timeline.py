"""The timeline picture: recorded by ``Prefetcher(timeline=True)``, drawn as SVG that parses as XML,
or as PNG with matplotlib (the ``plot`` extra)."""

import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from safeprefetch import Prefetcher
from safeprefetch._prefetcher.timeline import timeline_svg, write_timeline

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]
SVG = "{http://www.w3.org/2000/svg}"


class Slow:
    def __len__(self):
        return 12

    def fetch_into(self, i, out):
        time.sleep(0.002)
        out[...] = i


def _record(**kw):
    out = np.empty((4,), np.float32)
    with Prefetcher(Slow(), capacity=2, workers=2, shape=(4,), dtype=np.float32, timeline=True, **kw) as pf:
        while pf.copy_prefetched(out):
            time.sleep(0.001)
        return pf.timeline()


def test_timeline_records_every_thread_and_kind():
    data = _record()
    kinds = {(th, kind) for th, kind, _a, _b in data["spans"]}
    assert {("worker0", "fetch"), ("worker1", "fetch"), ("consumer", "wait"), ("consumer", "copy"),
            ("consumer", "compute")} <= kinds
    assert all(0 <= a <= b for _th, _k, a, b in data["spans"])
    assert data["occupancy"] and all(0 <= n <= 2 for _t, n in data["occupancy"])
    assert sum(1 for th, kind, *_ in data["spans"] if kind == "fetch") == 12


def test_timeline_svg_parses_as_xml_and_draws_each_lane(tmp_path):
    data = _record(autotune=True, max_capacity=4)
    path = write_timeline(tmp_path / "t.svg", data, title='a <title> & "quotes"')
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    texts = [t.text for t in root.iter(SVG + "text")]
    assert {"worker0", "worker1", "consumer"} <= set(texts)
    assert 'a <title> & "quotes"' in texts
    assert len(list(root.iter(SVG + "rect"))) > 12
    assert list(root.iter(SVG + "polyline"))


def test_timeline_needs_the_option_and_an_svg_name(tmp_path):
    with Prefetcher(np.zeros((3, 2), np.float32)) as pf:
        with pytest.raises(ValueError, match="timeline=True"):
            pf.timeline()
    with pytest.raises(ValueError, match="svg or .png"):
        write_timeline(tmp_path / "t.jpg", {"spans": [], "occupancy": []})
    ET.fromstring(timeline_svg({"spans": [], "occupancy": [], "workers": 1}))  # empty data still draws


def test_demo_timeline_option_writes_an_svg(tmp_path):
    path = tmp_path / "demo.svg"
    p = subprocess.run([sys.executable, "-m", "safeprefetch", "demo", "--small", "--batches", "12",
                        "--latency-ms", "1", "--dir", str(tmp_path / "shards"), "--timeline", str(path)],
                       capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    bad = subprocess.run([sys.executable, "-m", "safeprefetch", "demo", "--small", "--timeline", "x.jpg"],
                         capture_output=True, text=True, timeout=100)
    assert bad.returncode == 2 and ".svg or .png" in bad.stderr


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _has_colour(img, hex_colour: str) -> bool:
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    return bool((np.abs(img[..., :3] - rgb).max(axis=-1) < 0.02).any())


def test_timeline_png_is_a_readable_png_of_every_lane(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from safeprefetch._prefetcher.timeline import COLOURS, timeline_png

    data = _record(autotune=True, max_capacity=4)
    path = write_timeline(tmp_path / "t.png", data, title='a <title> & "quotes"', subtitle="two workers")
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    img = imread(path)
    height, width = img.shape[:2]
    assert width == 1320 and 300 < height < 800  # 11 x ~3.3 inches at 120 dpi
    assert _has_colour(img, COLOURS["fetch"]) and _has_colour(img, COLOURS["compute"])
    empty = timeline_png(tmp_path / "empty.png", {"spans": [], "occupancy": [], "workers": 1})
    assert imread(empty).shape[1] == 1320  # empty data still draws


def test_demo_timeline_option_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    path = tmp_path / "demo.png"
    p = subprocess.run([sys.executable, "-m", "safeprefetch", "demo", "--small", "--batches", "12",
                        "--latency-ms", "1", "--dir", str(tmp_path / "shards"), "--timeline", str(path)],
                       capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert imread(path).shape[1] == 1320


def _no_demo(*_a, **_k):
    raise AssertionError("the demo ran before --timeline was checked")


def test_demo_rejects_other_timeline_suffixes_before_running(tmp_path, monkeypatch, capsys):
    from safeprefetch._harness import demo as _demo
    from safeprefetch._cli.main import main

    monkeypatch.setattr(_demo, "run_demo", _no_demo)
    assert main(["demo", "--small", "--timeline", str(tmp_path / "t.jpg")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ".svg or .png" in err
    assert not (tmp_path / "t.jpg").exists()


def test_png_without_matplotlib_names_the_fix(tmp_path, monkeypatch, capsys):
    from safeprefetch._harness import demo as _demo
    from safeprefetch._cli.main import main
    from safeprefetch._prefetcher.timeline import PlotUnavailable

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(PlotUnavailable, match=r'pip install "safeprefetch\[plot\]"') as e:
        write_timeline(tmp_path / "t.png", {"spans": [], "occupancy": [], "workers": 1})
    assert isinstance(e.value, ImportError)
    assert not (tmp_path / "t.png").exists()
    write_timeline(tmp_path / "t.svg", {"spans": [], "occupancy": [], "workers": 1})  # SVG needs nothing

    monkeypatch.setattr(_demo, "run_demo", _no_demo)
    assert main(["demo", "--small", "--timeline", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "safeprefetch[plot]"' in err
