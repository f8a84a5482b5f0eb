"""plots, html_page and the inspection commands: real PNG files, self-contained HTML pages whose tables
hold the same numbers as the probe, and clear errors for bad suffixes and the wrong kind of run."""

from __future__ import annotations

import base64
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from seqlab.api.runs import load
from seqlab.cli.main import main
from seqlab.config import ModelConfig
from seqlab.data.tokenizer import ByteTokenizer
from seqlab.errors import UserError
from seqlab.inspection import plots
from seqlab.inspection import probes as probe
from seqlab.inspection.commands import lookup_path
from seqlab.inspection.html import heat_table
from seqlab.models import build_model

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TEXT = "Hi Ann,\nplease send the report."


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(block_size=40, n_layer=2, n_embd=16, n_head=2, pos="alibi", mlp_ratio=2)).eval()


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def assert_self_contained(page: str) -> list[bytes]:
    """No network references; returns the embedded PNGs (each checked to be a PNG)."""
    low = page.lower()
    assert "http://" not in low and "https://" not in low and "<script" not in low
    assert low.startswith("<!doctype html>") and low.rstrip().endswith("</html>")
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert images
    pngs = [base64.b64decode(i) for i in images]
    assert all(p[:8] == PNG_SIGNATURE and len(p) > 2000 for p in pngs)
    return pngs


def test_attention_png_and_html(model, tmp_path: Path) -> None:
    maps = probe.attention_maps(model, ByteTokenizer(), TEXT)
    png = plots.plot_attention(maps, tmp_path / "a.png")
    w, h = png_size(png)
    assert w > 400 and h > 400 and png.stat().st_size > 10_000
    page = plots.plot_attention(maps, tmp_path / "a.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    n = len(maps.labels)
    assert page.count("<table class='heat'>") == 4  # one table per (layer, head)
    assert page.count("class='masked'") == 4 * n * (n - 1) // 2  # the causal triangle, blank
    first_row = maps.weights[(0, 0)][1, :2]  # query 1 sees keys 0 and 1
    assert f">{first_row[0]:.2f}</td>" in page and f">{first_row[1]:.2f}</td>" in page
    assert "&lt;bos&gt;" in page and "⏎" in page


def test_soft_lookup_png_and_html(model, tmp_path: Path) -> None:
    lookup = probe.soft_lookup(model, ByteTokenizer(), TEXT, -1, 1, 0)
    png = plots.plot_soft_lookup(lookup, tmp_path / "s.png")
    assert png_size(png)[0] > 300
    page = plots.plot_soft_lookup(lookup, tmp_path / "s.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    rows = plots.lookup_rows(lookup)
    assert len(rows) == lookup.query_pos + 1 and set(rows[0]) >= {"score", "bias", "weight", "share"}
    assert page.count("<tr>") >= len(rows) + 1 + len(lookup.head_output)  # full key table + output table
    assert f"{rows[-1]['weight']:.4g}" in page


def test_position_and_gate_plots(tmp_path: Path) -> None:
    png_size(plots.plot_sinusoidal(tmp_path / "sin.png", 64, 32))
    page = plots.plot_sinusoidal(tmp_path / "sin.html", 8, 4).read_text(encoding="utf-8")
    assert_self_contained(page)
    assert page.count("<td ") == 8 * 4
    sim = np.eye(6) * 2 - 1
    png_size(plots.plot_position_similarity(sim, tmp_path / "sim.png"))
    rng = np.random.default_rng(0)
    labels = [str(i) for i in range(40)]
    r, z = rng.random((40, 16)), rng.random((40, 16))
    png_size(plots.plot_gates(labels, r, z, tmp_path / "g.png"))
    assert_self_contained(plots.plot_gates(labels, r, z, tmp_path / "g.html").read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="do not match"):
        plots.plot_gates(labels[:5], r, z, tmp_path / "bad.png")


def test_unknown_suffix_is_a_user_error(model, tmp_path: Path) -> None:
    maps = probe.attention_maps(model, ByteTokenizer(), TEXT)
    for name in ("a.pdf", "a", "a.svg"):
        with pytest.raises(UserError, match=r"\.png or \.html"):
            plots.plot_attention(maps, tmp_path / name)
    with pytest.raises(UserError):
        plots.plot_sinusoidal(tmp_path / "s.jpg", 4, 4)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_heat_table_shading_and_limits() -> None:
    table = heat_table(np.array([[0.0, 1.0]]), ["q"], ["<a>", "b"], lo=0.0, hi=1.0)
    assert "rgba(33,102,172,0.000)" in table and "rgba(33,102,172,1.000)" in table
    assert "&lt;a&gt;" in table
    too_big = heat_table(np.zeros((300, 300)), [""] * 300, [""] * 300, "big")
    assert "<table" not in too_big and "too many" in too_big


def test_attention_command_png(tiny_run_dir: Path, tmp_path: Path) -> None:
    written = load(tiny_run_dir, device="cpu").attention(TEXT, head=1).save(tmp_path / "attn.png")
    out = tmp_path / "attn.png"
    assert written == [out, lookup_path(out)]
    png_size(out)
    png_size(lookup_path(out))
    assert lookup_path(out).name == "attn-lookup.png"


def test_attention_command_html_holds_both_views(tiny_run_dir: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    long = "word " * 20  # longer than block_size 32: cropped, and the user is told
    out = tmp_path / "sub" / "attn.html"
    assert main(["attention", str(tiny_run_dir), long, "--out", str(out), "--layer", "0", "--query", "3"]) == 0
    page = out.read_text(encoding="utf-8")
    assert len(assert_self_contained(page)) == 2  # heatmaps and soft lookup on one page
    assert "Soft lookup of token 3" in page and "cropped" in page
    assert "cropped" in capsys.readouterr().err


def test_attention_command_errors(tiny_run_dir: Path, gru_run_dir: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    def error(*argv: str) -> str:
        assert main(["attention", *argv]) == 2
        return capsys.readouterr().err

    assert ".png or .html" in error(str(tmp_path / "no-such-run"), TEXT, "--out", str(tmp_path / "a.pdf"))  # first
    assert "without self-attention" in error(str(gru_run_dir), TEXT, "--out", str(tmp_path / "a.png"))
    assert "does not exist" in error(str(tiny_run_dir), TEXT, "--out", str(tmp_path / "a.png"), "--head", "7")
    with pytest.raises(UserError, match="empty"):
        load(tiny_run_dir, device="cpu").attention("")
    assert not (tmp_path / "a.png").exists()


def test_inspect_command(tiny_run_dir: Path, gru_run_dir: Path, tmp_path: Path) -> None:
    assert main(["inspect", str(gru_run_dir), TEXT, "--out", str(tmp_path / "gru")]) == 0
    written = sorted((tmp_path / "gru").iterdir())
    assert [p.name for p in written] == ["gates-layer0.png", "sinusoidal.png"]
    for p in written:
        png_size(p)
    view = load(tiny_run_dir, device="cpu").inspect(TEXT)  # rope: no learned table, no gates
    assert [p.name for p in view.save(tmp_path / "attn")] == ["sinusoidal.png"]
    assert view.gates == [] and view.position_similarity is None and view.sinusoidal.shape == (32, 32)
    with pytest.raises(UserError, match="empty"):
        load(gru_run_dir, device="cpu").inspect("")
    assert not (tmp_path / "empty").exists()
