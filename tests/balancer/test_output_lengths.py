# SPDX-License-Identifier: Apache-2.0
"""``OutputLengths``: the share of its cap an answer fills, per prompt quarter-octave and
octave and cap octave."""

from __future__ import annotations

import random

import pytest

from regions.balancer.scheduling.output_lengths import OutputLengths, octave, quarter


@pytest.mark.parametrize(
    ("tokens", "expected"), [(0, 0), (1, 0), (2, 1), (3, 1), (1023, 9), (1024, 10)]
)
def test_octave(tokens: int, expected: int) -> None:
    assert octave(tokens) == expected


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(0, 0), (3, 0), (4, 0), (7, 3), (1024, 0), (1279, 0), (1280, 1), (1536, 2), (2047, 3)],
)
def test_quarter(tokens: int, expected: int) -> None:
    assert quarter(tokens) == expected


def test_answers_that_change_within_an_octave_are_told_apart() -> None:
    """The Azure conversation trace's shape inside one octave: prompts of 1,024-1,279
    tokens get ~400-token answers, those of 1,536-2,047 ~90; an unseen quarter of the
    octave gets the octave's mean."""
    lengths = OutputLengths(alpha=0.02)
    rng = random.Random(5)
    for _ in range(2000):
        if rng.random() < 0.5:
            lengths.observe("m", rng.randint(1024, 1279), 1000, int(rng.gauss(400, 40)))
        else:
            lengths.observe("m", rng.randint(1536, 2047), 1000, int(rng.gauss(90, 20)))
    assert lengths.predict("m", 1100, 1000) == pytest.approx(400, rel=0.1)
    assert lengths.predict("m", 1800, 1000) == pytest.approx(90, rel=0.15)
    assert lengths.predict("m", 1400, 1000) == pytest.approx(245, rel=0.15)  # octave mean
    assert lengths.predict("m", 1100, None) == pytest.approx(400, rel=0.1)
    assert lengths.predict("m", 1800, None) == pytest.approx(90, rel=0.15)


def test_nothing_learned_predicts_nothing() -> None:
    lengths = OutputLengths(min_samples=8)
    for _ in range(7):
        lengths.observe("m", 1000, 1000, 200)
    assert lengths.predict("m", 1000, 1000) is None  # 7 < min_samples
    lengths.observe("m", 1000, 1000, 200)
    assert lengths.predict("m", 1000, 1000) == pytest.approx(200.0)
    assert lengths.predict("other", 1000, 1000) is None


def test_exact_caps_predict_each_requests_own_cap() -> None:
    """A client that declares its answer length: every share is 1."""
    lengths = OutputLengths()
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(20, 700)
        lengths.observe("m", rng.randint(50, 4000), n, n)
    for prompt, cap in ((100, 37), (1500, 420), (3000, 650), (9000, 5000)):
        assert lengths.predict("m", prompt, cap) == pytest.approx(cap)


def test_one_cap_for_all_predicts_the_mean_answer_to_prompts_of_that_size() -> None:
    """The Azure conversation trace's shape: mid-size prompts get longer answers."""
    lengths = OutputLengths(alpha=0.02)
    rng = random.Random(3)
    for _ in range(3000):
        prompt = rng.randint(64, 4000)
        mean = 350 if 512 <= prompt < 2048 else 100
        lengths.observe("m", prompt, 1000, int(rng.expovariate(1 / mean)))
    assert lengths.predict("m", 700, 1000) == pytest.approx(350, rel=0.25)
    assert lengths.predict("m", 1500, 1000) == pytest.approx(350, rel=0.25)
    assert lengths.predict("m", 100, 1000) == pytest.approx(100, rel=0.25)
    assert lengths.predict("m", 3000, 1000) == pytest.approx(100, rel=0.25)


def test_unseen_sizes_fall_back_to_the_cap_octave_then_any_cap() -> None:
    lengths = OutputLengths(min_samples=2)
    for _ in range(2):
        lengths.observe("m", 100, 1000, 500)  # cap octave 9: share 0.5
        lengths.observe("m", 100, 100, 100)  # cap octave 6: share 1
    # an unseen prompt octave, cap octave 9: that cap octave's share
    assert lengths.predict("m", 5000, 1000) == pytest.approx(500.0)
    # an unseen cap octave: the share over every cap, of this cap
    assert lengths.predict("m", 100, 10_000) == pytest.approx(0.75 * 10_000, rel=0.05)


def test_requests_without_a_cap_get_the_mean_answer_for_their_prompt_size() -> None:
    lengths = OutputLengths(min_samples=2)
    for _ in range(2):
        lengths.observe("m", 100, None, 40)
        lengths.observe("m", 1000, None, 400)
    assert lengths.predict("m", 100, None) == pytest.approx(40.0)
    assert lengths.predict("m", 1000, None) == pytest.approx(400.0)
    assert lengths.predict("m", 100_000, None) == pytest.approx(220.0, rel=0.05)  # the model's


def test_the_number_of_keys_is_bounded_and_fallbacks_still_learn() -> None:
    lengths = OutputLengths(min_samples=1, max_keys=8)
    for i in range(200):
        lengths.observe(f"model-{i}", 2**i % 10_000 + 1, 1000, 100)
    assert len(lengths._shares) <= 8 and len(lengths._means) <= 8
    lengths = OutputLengths(min_samples=1, max_keys=3)
    for prompt in (2, 4, 8, 16, 32):
        lengths.observe("m", prompt, 1000, 250)
    assert lengths.predict("m", 32, 1000) == pytest.approx(250.0)  # via a fallback key


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        OutputLengths(alpha=0)
    with pytest.raises(ValueError):
        OutputLengths(min_samples=0)
