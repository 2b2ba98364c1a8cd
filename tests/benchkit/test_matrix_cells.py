# SPDX-License-Identifier: Apache-2.0
"""``--cells``: the prompts and api dimensions take today's value unless named, so no
existing cell (or its label) changes; shared prompts need a trace with hash ids."""

from __future__ import annotations

import pytest

from benchkit.matrix import parse_cells

CELL = "slots=16;speeds=mixed;engine=whole;lengths=hidden;load=0.9"


def test_unnamed_prompts_and_api_keep_todays_cells_and_labels() -> None:
    assert len(parse_cells("")) == 4 * 2 * 2 * 3 * 2 * 2
    (cell,) = parse_cells(CELL + ";trace=azure-conv")
    assert (cell.prompts, cell.api) == ("counts", "completions")
    assert cell.label == ("slots=16 speeds=mixed engine=whole trace=azure-conv "
                          "lengths=hidden load=0.9")


@pytest.mark.parametrize(("text", "expected"), [
    ("trace=mooncake-conv;prompts=shared", [("shared", "completions")]),
    ("trace=mooncake-conv;prompts=shared;api=chat", [("shared", "chat")]),
    ("trace=mooncake-conv;prompts=counts,shared;api=completions,chat",
     [("counts", "completions"), ("counts", "chat"), ("shared", "completions"),
      ("shared", "chat")]),
], ids=["shared", "shared-chat", "all"])
def test_prompts_and_api_parse(text: str, expected: list[tuple[str, str]]) -> None:
    cells = parse_cells(f"{CELL};{text}")
    assert [(c.prompts, c.api) for c in cells] == expected


def test_a_shared_cell_names_its_dimensions_in_its_label() -> None:
    (cell,) = parse_cells(f"{CELL};trace=mooncake-conv;prompts=shared;api=chat")
    assert cell.label.endswith("load=0.9 prompts=shared api=chat")
    assert cell.to_json()["prompts"] == "shared"


def test_shared_prompts_leave_out_traces_without_hash_ids() -> None:
    cells = parse_cells(f"{CELL};prompts=shared")
    assert {c.trace for c in cells} == {"mooncake-conv"}
    with pytest.raises(ValueError, match="prompts=shared needs a trace with hash ids"):
        parse_cells(f"{CELL};trace=azure-conv;prompts=shared")


@pytest.mark.parametrize("text", ["prompts=text", "api=responses", "prompt=shared"])
def test_unknown_values_and_dimensions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--cells"):
        parse_cells(text)
