"""``python -m e2e.node_agent``: run the node agent (see `e2e.node_agent.cli`)."""

import sys

from e2e.node_agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
