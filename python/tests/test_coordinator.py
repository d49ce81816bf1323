"""The control loop against fake agents and a fake rank-0 status: which group runs, how a change
stops it, and what each change is measured to cost."""

import unittest

from colocate_torchrun.agents import GroupSpec
from colocate_torchrun.coordinator import Coordinator


class FakeAgents:
    def __init__(self) -> None:
        self.started: list[GroupSpec] = []
        self.codes: list[int | None] = []
        self.calls: list[str] = []

    def start(self, spec: GroupSpec) -> None:
        self.started.append(spec)
        self.codes = [None] * spec.size

    def request_stop(self) -> None:
        self.calls.append("stop")

    def kill(self, count: int) -> None:
        self.calls.append(f"kill {count}")

    def exit_codes(self) -> list[int | None]:
        return list(self.codes)

    def kill_all(self) -> None:
        self.calls.append("kill all")
        self.codes = [c if c is not None else -9 for c in self.codes]

    def exit(self, *codes: int) -> None:
        self.codes = list(codes)


class Job:
    """The status.json rank 0 would write."""

    def __init__(self) -> None:
        self.status: dict[str, object] | None = None

    def step(self, group: int, step: int, resumed: int, first_step_at: float, state: str = "running") -> None:
        self.status = {"generation": group, "step": step, "resumed_step": resumed, "first_step_at": first_step_at,
                       "state": state}  # fmt: skip


def coordinator(agents: FakeAgents, job: Job, target: int = 4, mode: str = "graceful") -> Coordinator:
    return Coordinator("job", agents, lambda: job.status, ("--steps", "100"), target=target, mode=mode)  # type: ignore[arg-type]


def stepping(step: int, mode: str = "graceful", first_step_at: float = 1.0, seen_at: float = 2.0) -> tuple[FakeAgents, Job, Coordinator]:
    """A coordinator whose first group (4 agents) took its first step at ``first_step_at`` and
    is seen at ``step`` at ``seen_at``."""
    agents, job = FakeAgents(), Job()
    c = coordinator(agents, job, mode=mode)
    c.tick(0.0)
    job.step(1, step, 0, first_step_at=first_step_at)
    c.tick(seen_at)
    return agents, job, c


class CoordinatorTest(unittest.TestCase):
    def test_a_group_of_the_target_starts_and_counts_once_it_steps(self) -> None:
        agents, job = FakeAgents(), Job()
        c = coordinator(agents, job)
        c.tick(0.0)
        self.assertEqual([(s.group, s.size) for s in agents.started], [(1, 4)])
        self.assertEqual(c.view()["phase"], "Pending")
        self.assertEqual((c.view()["current"], c.view()["pending"]), (0, 4))
        job.step(1, 1, 0, first_step_at=8.0)
        c.tick(9.0)
        self.assertEqual(c.view()["phase"], "Running")
        self.assertEqual((c.view()["current"], c.view()["pending"]), (4, 0))

    def test_a_graceful_shrink_stops_at_a_step_restarts_smaller_and_loses_nothing(self) -> None:
        agents, job, c = stepping(40, first_step_at=8.0, seen_at=20.0)
        c.target = 2
        c.tick(21.0)
        self.assertEqual(agents.calls, ["stop"])
        self.assertEqual(c.view()["phase"], "Rescaling")
        job.step(1, 41, 0, first_step_at=8.0, state="stopped")  # checkpointed at step 41
        agents.exit(0, 0, 0, 0)
        c.tick(22.5)
        self.assertEqual([(s.group, s.size) for s in agents.started], [(1, 4), (2, 2)])
        job.step(2, 42, 41, first_step_at=28.0)
        c.tick(28.5)
        [r] = c.rescales
        self.assertEqual((r.from_size, r.to_size, r.mode), (4, 2, "graceful"))
        self.assertEqual((r.release_s, r.restart_s, r.pause_s, r.lost_steps), (1.5, 5.5, 7.0, 0))
        self.assertEqual((c.view()["worker_release_s"], c.view()["rescale_cost_s"]), (1.5, 7.0))

    def test_a_kill_loses_the_steps_since_the_checkpoint(self) -> None:
        agents, job, c = stepping(73, mode="kill", first_step_at=8.0, seen_at=20.0)
        c.target = 3
        c.tick(21.0)
        self.assertEqual(agents.calls, ["kill 1"])
        agents.exit(1, 1, 1, -9)
        c.tick(23.0)
        job.step(2, 51, 50, first_step_at=30.0)  # resumed from the checkpoint of step 50
        c.tick(31.0)
        [r] = c.rescales
        self.assertEqual((r.mode, r.last_step, r.resumed_step, r.lost_steps), ("kill", 73, 50, 23))
        # only graceful changes are what the master announces
        self.assertIsNone(c.view()["worker_release_s"])

    def test_a_grow_in_kill_mode_is_graceful(self) -> None:
        agents, job, c = stepping(5, mode="kill")
        c.target = 6
        c.tick(3.0)
        self.assertEqual(agents.calls, ["stop"])

    def test_a_group_still_starting_is_ended_at_once(self) -> None:
        agents, job = FakeAgents(), Job()
        c = coordinator(agents, job)
        c.tick(0.0)
        c.target = 2
        c.tick(1.0)
        self.assertEqual(agents.calls, ["kill all"])
        c.tick(1.2)
        self.assertEqual([s.size for s in agents.started], [4, 2])

    def test_a_graceful_stop_that_hangs_is_killed_after_its_deadline(self) -> None:
        agents, job, c = stepping(5)
        c.stop_timeout_s = 10.0
        c.target = 2
        c.tick(3.0)
        c.tick(12.0)
        self.assertEqual(agents.calls, ["stop"])
        c.tick(13.5)
        self.assertEqual(agents.calls, ["stop", "kill all"])

    def test_agents_exiting_unasked_restart_the_group_until_too_many_failures(self) -> None:
        agents, job = FakeAgents(), Job()
        c = coordinator(agents, job)
        c.max_failures = 2
        for attempt in range(3):
            c.tick(10.0 * attempt)
            agents.exit(1, 1, 1, 1)
            c.tick(10.0 * attempt + 1)
        self.assertEqual(c.phase, "Failed")
        self.assertEqual(len(agents.started), 3)
        self.assertEqual([r.mode for r in c.rescales], ["failure", "failure"])

    def test_one_agent_gone_gives_its_peers_the_timeout_then_ends_the_group(self) -> None:
        agents, job, c = stepping(5)
        c.pg_timeout_s = 5.0
        agents.codes[3] = -9
        c.tick(3.0)
        c.tick(12.0)  # within the timeout and its margin: the peers may still fail by themselves
        self.assertEqual(agents.calls, [])
        c.tick(13.5)
        self.assertEqual(agents.calls, ["kill all"])
        c.tick(14.0)
        self.assertEqual([s.size for s in agents.started], [4, 4])

    def test_a_completed_job_is_not_restarted(self) -> None:
        agents, job = FakeAgents(), Job()
        c = coordinator(agents, job)
        c.tick(0.0)
        job.step(1, 100, 0, first_step_at=1.0, state="completed")
        c.tick(5.0)
        agents.exit(0, 0, 0, 0)
        c.tick(6.0)
        self.assertEqual(c.phase, "Completed")
        c.tick(7.0)
        self.assertEqual(len(agents.started), 1)


if __name__ == "__main__":
    unittest.main()
