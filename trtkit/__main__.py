import sys

from trtkit.cli import main

sys.exit(main())
