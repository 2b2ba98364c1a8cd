# SPDX-License-Identifier: Apache-2.0
"""The tail breakdown of routing dumps: which rows count, and what the slowest 1% are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from routing_tails import decode_ms, load, slowest


def _row(at: float, ttft: float, e2e: float | None, out: int, backend: str, **tag: object) -> dict:
    return {
        "at": at,
        "ttft": ttft,
        "e2e": e2e,
        "output_tokens": out,
        "prompt_tokens": 1000,
        "backend": backend,
        **tag,
    }


def test_load_keeps_completed_counted_rows_per_setup_and_slice(tmp_path: Path) -> None:
    rows = [
        _row(20.0, 0.1, 2.0, 100, "gpu0", setup="ours", seed=1),
        _row(5.0, 0.1, 2.0, 100, "gpu0", setup="ours", seed=1),  # warm-up
        _row(30.0, 0.1, None, 100, "gpu0", setup="ours", seed=1),  # never completed
        _row(40.0, 0.1, 2.0, 100, "gpu4", setup="ours", seed=2),
        _row(50.0, 0.1, 2.0, 100, "", setup="haproxy", repeat=1),  # a live dump's row
    ]
    path = tmp_path / "dump.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = load(path, (15.0, 135.0))
    assert {k: len(v) for k, v in runs.items()} == {
        ("ours", 1): 1,
        ("ours", 2): 1,
        ("haproxy", 1): 1,
    }


def test_slowest_names_the_gpus_and_sizes_of_the_tail() -> None:
    fast = [_row(20.0 + i, 0.1, 5.0, 100, "gpu0", queued=0.0) for i in range(198)]
    tail = [
        _row(30.0, 2.0, 20.0, 500, "gpu4", queued=1.5),
        _row(31.0, 1.8, 19.0, 450, "gpu2", queued=1.0),
    ]
    p99, text = slowest(fast + tail, "e2e", 0.01)
    assert p99 == 5.0  # nearest rank: the 198th of 200; the slowest 1% are the 2 beyond it
    assert text.split() == ["0.6:1", "0.4:1", "prompt", "1000", "out", "475", "queued", "1.25"]


def test_decode_ms_is_per_token_after_the_first_by_gpu_speed() -> None:
    rows = [
        _row(20.0, 0.5, 0.5 + 0.0192 * 300, 301, "gpu0"),  # 19.2 ms per token
        _row(21.0, 0.5, 0.5 + 0.048 * 300, 301, "gpu5"),  # 48 ms per token
        _row(22.0, 0.5, 9.0, 50, "gpu5"),  # a short answer: not counted
    ]
    assert decode_ms(rows, 200) == "1: 19.2 / 19.2  0.4: 48.0 / 48.0"
