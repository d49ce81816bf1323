"""Tests of the torchrun master: unit tests of its logic and runs of real torchrun groups."""
