"""The protocol's bookkeeping: generation, idempotent ids, bounds, and the body's checks."""

import unittest

from colocate_torchrun.ledger import BadCommand, Ledger, ScaleCommand, ScaleRefused, parse_scale_command


class LedgerTest(unittest.TestCase):
    def test_a_new_target_moves_the_generation_and_a_repeat_changes_nothing(self) -> None:
        ledger = Ledger(1, 8, 4)
        first = ledger.scale(ScaleCommand("a", 6))
        self.assertEqual((first.accepted_target, first.generation, first.changed), (6, 2, True))
        again = ledger.scale(ScaleCommand("a", 6))
        self.assertEqual((again.accepted_target, again.generation, again.changed), (6, 2, False))
        self.assertEqual(ledger.target, 6)

    def test_a_reused_id_gets_its_first_answer_even_with_another_target(self) -> None:
        ledger = Ledger(1, 8, 4)
        ledger.scale(ScaleCommand("a", 6))
        answer = ledger.scale(ScaleCommand("a", 2))
        self.assertEqual((answer.accepted_target, answer.generation), (6, 2))
        self.assertEqual(ledger.target, 6)

    def test_the_same_target_under_a_new_id_keeps_the_generation(self) -> None:
        ledger = Ledger(1, 8, 4)
        answer = ledger.scale(ScaleCommand("a", 4))
        self.assertEqual((answer.generation, answer.changed), (1, False))

    def test_a_target_outside_the_bounds_is_409_with_them_and_not_remembered(self) -> None:
        ledger = Ledger(2, 8, 4)
        with self.assertRaises(ScaleRefused) as refused:
            ledger.scale(ScaleCommand("a", 9))
        self.assertEqual(refused.exception.status, 409)
        self.assertEqual(refused.exception.details, {"min": 2, "max": 8})
        ledger.maximum = 10  # a retry of the refused id is checked again
        self.assertEqual(ledger.scale(ScaleCommand("a", 9)).accepted_target, 9)

    def test_command_ids_are_bounded_in_length_and_in_memory(self) -> None:
        ledger = Ledger(1, 8, 4, remembered=2)
        with self.assertRaises(ScaleRefused) as refused:
            ledger.scale(ScaleCommand("", 5))
        self.assertEqual(refused.exception.status, 400)
        with self.assertRaises(ScaleRefused):
            ledger.scale(ScaleCommand("x" * 257, 5))
        ledger.scale(ScaleCommand("a", 5))
        ledger.scale(ScaleCommand("b", 6))
        ledger.scale(ScaleCommand("c", 7))
        # "a" was forgotten, so it is a new command now
        self.assertTrue(ledger.scale(ScaleCommand("a", 5)).changed)

    def test_bad_configurations_are_refused_with_what_is_wrong(self) -> None:
        with self.assertRaisesRegex(ValueError, r"min workers \(3\) is above max workers \(2\)"):
            Ledger(3, 2, 2)
        with self.assertRaisesRegex(ValueError, r"initial workers \(9\) outside \[1, 8\]"):
            Ledger(1, 8, 9)


class ParseTest(unittest.TestCase):
    def test_a_full_command_and_unknown_fields(self) -> None:
        c = parse_scale_command(
            {"command_id": "x", "target": 3, "reason": "grow", "deadline_s": 30, "release_pods": ["w-1"], "later": 1}
        )
        self.assertEqual(c, ScaleCommand("x", 3, "grow", 30.0, ("w-1",)))

    def test_each_malformed_field_is_named(self) -> None:
        cases = {
            "body": [],
            "command_id": {"target": 3},
            "target": {"command_id": "x", "target": "3"},
            "reason": {"command_id": "x", "target": 3, "reason": 1},
            "deadline_s": {"command_id": "x", "target": 3, "deadline_s": -1},
            "release_pods": {"command_id": "x", "target": 3, "release_pods": "w-1"},
        }
        for field, body in cases.items():
            with self.subTest(field=field), self.assertRaises(BadCommand) as bad:
                parse_scale_command(body)
            self.assertEqual(bad.exception.field, field)
        with self.assertRaises(BadCommand):
            parse_scale_command({"command_id": "x", "target": True})


if __name__ == "__main__":
    unittest.main()
