"""The chaos suite (issue 10): the real nanomem processes on one home, killed at random instants
against loopback fakes, then checked for lost messages and damaged state. `python -m tests.chaos`
runs it on demand; tests/chaos/test_chaos.py is the fast variant CI collects."""
