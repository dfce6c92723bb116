import sys

from nanomem.cli.main import main

sys.exit(main())
