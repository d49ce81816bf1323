"""Which worker pods a shrink removes, and how the group follows the running pods."""

import unittest

from colocate_torchrun.worker_pods import PodSync, WorkerPod, leaving


def pod(name: str, running: bool = True, created: float = 0.0, deleting: bool = False) -> WorkerPod:
    return WorkerPod(name, running and not deleting, deleting, created)


class FakePods:
    def __init__(self, pods: list[WorkerPod], replicas: int) -> None:
        self.pods, self._replicas = pods, replicas
        self.preferred: list[list[str]] = []

    def list_pods(self) -> list[WorkerPod]:
        return list(self.pods)

    def replicas(self) -> int:
        return self._replicas

    def scale(self, replicas: int) -> None:
        self._replicas = replicas

    def prefer_to_remove(self, names: list[str]) -> None:
        self.preferred.append(names)


class LeavingTest(unittest.TestCase):
    def test_named_pods_leave_first_then_pods_not_running_then_the_newest(self) -> None:
        pods = [pod("a", created=1), pod("b", created=3), pod("c", running=False, created=2), pod("d", created=4)]
        self.assertEqual(leaving(pods, 3, ("b",)), ["b"])
        self.assertEqual(leaving(pods, 2, ("b", "gone")), ["b", "c"])
        self.assertEqual(leaving(pods, 1, ()), ["c", "d", "b"])
        self.assertEqual(leaving(pods, 4, ("a",)), [])

    def test_pods_being_deleted_are_already_leaving(self) -> None:
        pods = [pod("a"), pod("b", deleting=True), pod("c", created=5)]
        self.assertEqual(leaving(pods, 1, ()), ["c"])


class PodSyncTest(unittest.TestCase):
    def test_a_shrink_marks_the_named_pods_scales_and_shrinks_the_group_at_once(self) -> None:
        fake = FakePods([pod(f"w-{i}", created=i) for i in range(4)], replicas=4)
        sync = PodSync(fake)
        self.assertEqual(sync.sync(4, (), now=0.0), 4)
        self.assertEqual(sync.sync(2, ("w-0",), now=1.0), 2)
        self.assertEqual(fake.preferred, [["w-0", "w-3"]])
        self.assertEqual(fake.replicas(), 2)

    def test_a_grow_waits_for_the_pods_to_run_and_settle(self) -> None:
        fake = FakePods([pod("w-0"), pod("w-1")], replicas=2)
        sync = PodSync(fake, settle_s=5.0)
        self.assertEqual(sync.sync(2, (), now=0.0), 2)
        self.assertEqual(sync.sync(4, (), now=1.0), 2)
        self.assertEqual(fake.replicas(), 4)
        fake.pods.append(pod("w-2"))
        self.assertEqual(sync.sync(4, (), now=2.0), 2)  # one more runs: wait for the other
        self.assertEqual(sync.sync(4, (), now=6.9), 2)
        self.assertEqual(sync.sync(4, (), now=7.1), 3)  # none came for 5 s: grow with what runs
        fake.pods.append(pod("w-3"))
        self.assertEqual(sync.sync(4, (), now=7.5), 4)  # all of the target run: at once


if __name__ == "__main__":
    unittest.main()
