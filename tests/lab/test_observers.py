"""What the HA drills count of DNS answers: a changed answer is one that differs from the
answer before the fault otherwise than by leaving out the balancer the fault took down."""

from __future__ import annotations

from director.lab.observers import DnsSample, DnsWatch

BOTH = frozenset({"10.0.0.1", "10.0.0.2"})


def test_leaving_out_the_dead_balancer_is_not_a_change() -> None:
    watch = DnsWatch("chat.example", "10.0.0.53")
    answers = [BOTH, BOTH, frozenset({"10.0.0.2"}), frozenset({"10.0.0.1"}), BOTH]
    watch.samples = [DnsSample(100.0 + i, True, a, 1.0) for i, a in enumerate(answers)]
    watch.samples.append(DnsSample(106.0, False, frozenset(), 2000.0))
    report = watch.summary(BOTH, 100.5, dead="10.0.0.1")
    assert (report["queries"], report["failed"], report["changed"]) == (5, 1, 1)
    assert (report["left_out_dead"], report["left_out_after_s"]) == (1, 1.5)
    # without a dead balancer, or when it is the only address, any difference is a change
    assert watch.summary(BOTH, 100.5)["changed"] == 2
    lone = frozenset({"10.0.0.1"})
    assert watch.summary(lone, 100.5, dead="10.0.0.1")["changed"] == 3
