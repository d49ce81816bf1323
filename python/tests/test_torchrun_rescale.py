"""Real torchrun groups under the master: grow and shrink through master protocol v1.2 while a
small model trains on gloo, and what each change costs (graceful: nothing; a kill: the steps
since the last checkpoint)."""

from __future__ import annotations

import statistics
import tempfile
import time
import unittest
from pathlib import Path

from tests.master_process import MasterProcess, require_torch

# Small enough for CI on two cores, slow enough per step that a change lands mid-training.
TRAIN = ["--train-samples", "20000", "--test-samples", "4000", "--steps", "100000", "--eval-every", "10",
         "--step-delay-s", "0.05"]  # fmt: skip


class TorchrunRescaleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        require_torch()

    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="colocate-torchrun-"))

    def start(self, name: str, master_args: list[str], train_args: list[str]) -> MasterProcess:
        master = MasterProcess(self.tmp / name, master_args, train_args)
        self.addCleanup(master.stop)
        return master

    def test_a_grow_and_a_shrink_lose_no_step_and_the_loss_keeps_falling(self) -> None:
        m = self.start("graceful", ["--job", "wide-deep", "--min-workers", "1", "--max-workers", "3", "--workers", "2"],
                       ["--task", "wide-deep", "--checkpoint-every", "1000", *TRAIN])  # fmt: skip
        first = m.running_with(2)
        self.assertEqual(first["generation"], 1)
        self.assertTrue(first["checkpoint"]["on_demand"])
        m.wait_for("a few evaluations", lambda s: len(m.curve()) >= 3)
        self.assertEqual(m.scale("grow-1", 3, "grow"), {"accepted_target": 3, "generation": 2})
        m.running_with(3)
        m.wait_for("evaluations at 3 workers", lambda s: sum(p["world_size"] == 3 for p in m.curve()) >= 3)
        self.assertEqual(m.scale("shrink-1", 1)["generation"], 3)
        status = m.running_with(1)
        m.wait_for("evaluations at 1 worker", lambda s: sum(p["world_size"] == 1 for p in m.curve()) >= 3)
        self.assertEqual(status["workers"], {"current": 1, "target": 1, "min": 1, "max": 3, "pending": 0})

        grow, shrink = m.rescales()
        self.assertEqual([(r["from_size"], r["to_size"], r["mode"]) for r in (grow, shrink)],
                         [(2, 3, "graceful"), (3, 1, "graceful")])  # fmt: skip
        for r in (grow, shrink):
            # the workers checkpoint at the step they are asked at: at most one step per worker lost
            self.assertLessEqual(r["lost_steps"], 1, r)
            self.assertGreater(r["release_s"], 0.0)
            self.assertGreater(r["restart_s"], 0.0)
        # what the master announces is what it measured
        self.assertAlmostEqual(status["worker_release_s"], statistics.median([grow["release_s"], shrink["release_s"]]), 2)
        curve = m.curve()
        by_size = {n: [p["test_loss"] for p in curve if p["world_size"] == n] for n in (1, 2, 3)}
        self.assertLess(by_size[3][-1], by_size[2][0])
        self.assertLess(by_size[1][-1], by_size[3][0])
        steps = [p["step"] for p in curve]
        self.assertEqual(steps, sorted(steps), "a generation resumed behind the step its predecessor stopped at")
        self.assertEqual(m.stop(), 0)
        self.assertEqual(m.leftover_processes(), [])

    def test_a_kill_loses_the_steps_since_the_checkpoint_and_an_on_demand_one_saves_them(self) -> None:
        m = self.start("kill", ["--job", "mlp", "--min-workers", "1", "--max-workers", "2", "--workers", "2",
                                "--shrink", "kill", "--pg-timeout-s", "10"],
                       ["--task", "mlp", "--checkpoint-every", "1000", *TRAIN])  # fmt: skip
        m.running_with(2)
        m.wait_for("30 steps", lambda s: s["progress"]["done"] >= 30 * 840)
        code, answer = m.request("POST", "/v1/checkpoint", {"command_id": "before-the-spike"})
        self.assertEqual((code, answer), (202, {"requested": 1}))
        asked = m.wait_for("the requested checkpoint", lambda s: s["checkpoint"]["step"] >= 30)
        self.assertLess(asked["checkpoint"]["age_s"], 5.0)
        checkpoint_step = asked["checkpoint"]["step"]
        m.wait_for("20 more steps", lambda s: s["progress"]["done"] >= (checkpoint_step + 20) * 840)
        m.scale("preempt", 1)
        m.running_with(1, timeout_s=90)
        [kill] = m.rescales()
        self.assertEqual(kill["mode"], "kill")
        self.assertEqual(kill["resumed_step"], checkpoint_step)
        self.assertGreaterEqual(kill["lost_steps"], 20)
        self.assertEqual(kill["lost_steps"], kill["last_step"] - checkpoint_step)
        # the killed agents' workers are gone too: nothing of the old group trains on
        m.wait_for("a few evaluations at 1 worker", lambda s: sum(p["world_size"] == 1 for p in m.curve()) >= 2)
        late = [p for p in m.curve() if p["generation"] == 1 and p["at"] > kill["released_at"]]
        self.assertEqual(late, [])
        # a kill is not what the master announces as its release
        self.assertNotIn("worker_release_s", m.status())
        self.assertEqual(m.stop(), 0)
        self.assertEqual(m.leftover_processes(), [])

    def test_the_protocol_answers_bad_requests_by_name(self) -> None:
        token_file = self.tmp / "token"
        token_file.write_text("s3cret\n")
        m = self.start("errors", ["--job", "mlp", "--min-workers", "1", "--max-workers", "2", "--workers", "1",
                                  "--token-file", str(token_file)],
                       ["--task", "mlp", *TRAIN])  # fmt: skip
        deadline = time.time() + 30
        while True:
            try:
                code, body = m.request("GET", "/v1/status")
                break
            except OSError:
                self.assertLess(time.time(), deadline, "the master never listened")
                time.sleep(0.2)
        self.assertEqual(code, 401)
        code, body = m.request("POST", "/v1/scale", {"command_id": "x", "target": 3}, token="s3cret")
        self.assertEqual((code, body["min"], body["max"]), (409, 1, 2))
        code, body = m.request("POST", "/v1/scale", {"command_id": "x", "target": "two"}, token="s3cret")
        self.assertEqual((code, body["field"]), (400, "target"))
        code, body = m.request("POST", "/v1/checkpoint", {}, token="s3cret")
        self.assertEqual((code, body["field"]), (400, "command_id"))
        code, body = m.request("GET", "/v1/status", token="s3cret")
        self.assertEqual((code, body["job"], body["workers"]["max"]), (200, "mlp", 2))


if __name__ == "__main__":
    unittest.main()
