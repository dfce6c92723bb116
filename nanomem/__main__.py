import sys

from nanomem.cli import main

sys.exit(main())
