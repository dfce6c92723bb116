"""`python -m tests.chaos`: see tests/chaos/run.py."""

from tests.chaos.run import main

raise SystemExit(main())
