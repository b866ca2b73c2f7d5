"""`python -m broker`: run a broker (same flags as `keybus broker`)."""

import sys

from broker.main import main

sys.exit(main())
