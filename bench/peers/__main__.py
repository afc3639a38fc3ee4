import sys

from bench.peers.run import main

sys.exit(main())
