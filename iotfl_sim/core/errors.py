"""The error types raised in one layer and caught in another: bad input, reported as one line per problem
and exit status 2 (``cli.py``), wherever it is found (configuration, the fleet's traces, the engine's
set-up, a checkpoint read back)."""

from __future__ import annotations


class ScenarioError(Exception):
    """A problem in the user's input. The message is meant to be printed as is (one line per problem)."""


class CheckpointError(ScenarioError):
    """State that cannot be written to, or read from, a checkpoint (reported like bad input: exit status 2)."""
